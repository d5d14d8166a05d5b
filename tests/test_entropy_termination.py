"""The entropy termination rule (forking tokens): the segmentation against an independent per-row loop, its
options from the CLI, the rollout's recorded entropies against an independent forward, and the viewer."""
from __future__ import annotations

import math

import pytest
import torch

from dschat.rlhf.macro_action import SegmentationBatch, TerminationOptions, build_termination
from dschat.rlhf.macro_action.termination import entropy_segments
from tests.conftest import build_trainer


def loop_oracle(entropy, mask, threshold=None, quantile=0.2):
    """Row by row, token by token: the cut is the threshold, or the ceil(q*L)-th largest response entropy; a
    macro ends after every response token at or above the cut."""
    out = torch.full(entropy.shape, -1, dtype=torch.long)
    for row in range(entropy.shape[0]):
        positions = [t for t in range(entropy.shape[1]) if mask[row, t]]
        values = [float(entropy[row, t]) for t in positions]
        if threshold is not None:
            cut = threshold
        else:
            count = math.ceil(len(values) * quantile)
            cut = sorted(values, reverse=True)[count - 1] if count and values else math.inf
        macro = 0
        for t, value in zip(positions, values):
            out[row, t] = macro
            if value >= cut:
                macro += 1
    return out


def test_hand_example():
    entropy = torch.tensor([[9.0, 0.1, 2.0, 0.3, 0.2, 1.5, 0.1, 0.0]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 0]])
    # threshold 1.0: forks at 2.0 and 1.5 -> macros [0.1 2.0] [0.3 0.2 1.5] [0.1]
    assert entropy_segments(entropy, mask, threshold=1.0).tolist() == [[-1, 0, 0, 1, 1, 1, 2, -1]]
    # top 1/3 of 6 response tokens = the 2 highest (2.0, 1.5): the same cut; the prompt's 9.0 is not a candidate
    assert entropy_segments(entropy, mask, quantile=1 / 3).tolist() == [[-1, 0, 0, 1, 1, 1, 2, -1]]
    # quantile 0: no fork, one macro; quantile 1: every token a fork, token-level macros
    assert entropy_segments(entropy, mask, quantile=0.0).tolist() == [[-1, 0, 0, 0, 0, 0, 0, -1]]
    assert entropy_segments(entropy, mask, quantile=1.0).tolist() == [[-1, 0, 1, 2, 3, 4, 5, -1]]


@pytest.mark.parametrize("quantile,threshold", [(0.2, None), (0.5, None), (0.07, None), (0.2, 1.2)])
@pytest.mark.parametrize("side", ["left", "right"])
def test_matches_loop_oracle_on_padded_batches(quantile, threshold, side):
    generator = torch.Generator().manual_seed(3)
    mask = torch.zeros(16, 30, dtype=torch.long)
    for row in range(16):
        length = int(torch.randint(0, 25, (1,), generator=generator))
        start = int(torch.randint(0, 30 - length + 1, (1,), generator=generator)) if side == "left" else 2
        mask[row, start:start + length] = 1
    entropy = torch.rand(16, 30, generator=generator) * 3
    entropy[:, ::7] = 1.2  # ties at the threshold
    expected = loop_oracle(entropy, mask, threshold, quantile)
    assert torch.equal(entropy_segments(entropy, mask, threshold, quantile), expected)
    assert torch.equal(entropy_segments(entropy.double(), mask.bool(), threshold, quantile), expected)


def test_rule_through_registry_reads_options_and_needs_entropy():
    entropy = torch.tensor([[0.1, 3.0, 0.2, 0.3, 2.5, 0.1]])
    mask = torch.ones_like(entropy, dtype=torch.long)
    rule = build_termination("entropy", TerminationOptions(entropy_threshold=2.0))
    assert rule(SegmentationBatch(action_mask=mask, entropy=entropy)).segment_ids.tolist() == [[0, 0, 1, 1, 1, 2]]
    rule = build_termination("entropy", TerminationOptions(entropy_quantile=1 / 6))
    assert rule(SegmentationBatch(action_mask=mask, entropy=entropy)).segment_ids.tolist() == [[0, 0, 1, 1, 1, 1]]
    with pytest.raises(ValueError, match="entropy"):
        rule(SegmentationBatch(action_mask=mask))


def test_cli_flags_reach_the_rule_options():
    from dschat.cli import ppo

    args = ppo.build_parser().parse_config(["--actor_model_name_or_path", "tiny-gemma", "--output_dir", "x",
                                            "--termination", "entropy", "--entropy_quantile", "0.3",
                                            "--entropy_threshold", "1.5"])
    options = args.termination_options(seed=args.seed)
    assert (options.entropy_quantile, options.entropy_threshold) == (0.3, 1.5)


def test_rollout_entropies_equal_an_independent_forward_and_reach_the_rule(tmp_path):
    """What the trainer records while sampling is the entropy of softmax(logits / T) at each response token,
    recomputed here from one full forward of the actor; the segmentation the trainer stores is the rule's on
    those entropies (not a fallback, not another rule's)."""
    trainer = build_trainer(tmp_path, ["--termination", "entropy", "--entropy_quantile", "0.3",
                                       "--temperature", "0.7", "--max_new_tokens", "12"])
    torch.manual_seed(0)
    prompt_ids = torch.randint(10, 200, (8, 6))
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[:3, :2] = 0  # left padding
    prompt_ids[:3, :2] = trainer.tokenizer.pad_token_id
    experience, stats = trainer.make_experience({"input_ids": prompt_ids, "attention_mask": prompt_mask})
    from dschat.model import position_ids

    with torch.no_grad():
        logits = trainer.engines.actor.module(input_ids=experience.seq, attention_mask=experience.attention_mask,
                                              position_ids=position_ids(experience.attention_mask)).logits
    expected = torch.distributions.Categorical(logits=logits[:, :-1].float() / 0.7).entropy()
    on = experience.action_mask.bool()
    assert torch.equal(experience.segment_ids, entropy_segments(expected, on, quantile=0.3))
    assert stats["policy/entropy"] == pytest.approx(float(expected[on].mean()), abs=1e-4)


def test_a_rollout_without_recorded_entropies_gets_them_from_an_actor_forward(tmp_path):
    """An engine that records no entropy (vLLM): the trainer computes them by an actor forward at the sampling
    temperature, and the entropy rule cuts exactly as on the entropies the HF engine recorded while sampling."""
    trainer = build_trainer(tmp_path, ["--termination", "entropy", "--entropy_quantile", "0.3",
                                       "--temperature", "0.7", "--max_new_tokens", "12"])
    torch.manual_seed(1)
    prompt_ids = torch.randint(10, 200, (8, 6))
    prompt_mask = torch.ones_like(prompt_ids)
    rollout, attention_mask, action_mask = trainer.sample(prompt_ids, prompt_mask, record_entropy=True)
    recorded, _ = trainer.experience_from_rollout(rollout.seq, attention_mask, action_mask, entropy=rollout.entropy)
    computed, stats = trainer.experience_from_rollout(rollout.seq, attention_mask, action_mask)
    assert recorded.segment_ids.max() > 0
    assert torch.equal(computed.segment_ids, recorded.segment_ids)
    expected = (rollout.entropy * action_mask).sum() / action_mask.sum()
    assert stats["policy/entropy"].item() == pytest.approx(expected.item(), rel=1e-5)
