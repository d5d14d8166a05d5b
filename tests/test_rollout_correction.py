"""The rollout correction (``--rollout_is``, issue 30): truncated importance weights per token, per macro action
and per sequence against an independent loop computation, each level's cap, ``--ngram 1`` macro = token, and
the flags reaching the policy loss of a real step-3 update."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import TINY_PPO, one_line_error, read_metrics
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.experience import rollout_masks, sequence_logprobs
from dschat.rlhf.macro_action import importance_weights, logprob_gap, policy_loss
from dschat.rlhf.rollout import Rollout
from dschat.rlhf.rollout.hf import HFRolloutEngine


def loop_weights(log_ratio, mask, segments, level, cap):
    """The weights written out per row and unit in float64 (independent of the batched implementation)."""
    rows, width = len(mask), len(mask[0])
    out = [[0.0] * width for _ in range(rows)]
    for b in range(rows):
        positions = [t for t in range(width) if mask[b][t]]
        if level == "token":
            units = [[t] for t in positions]
        elif level == "sequence":
            units = [positions]
        else:
            units = {}
            for t in positions:
                units.setdefault(segments[b][t], []).append(t)
            units = list(units.values())
        for unit in units:
            weight = min(math.exp(sum(log_ratio[b][t] for t in unit)), cap)
            for t in unit:
                out[b][t] = weight
    return torch.tensor(out, dtype=torch.float64)


def batch(generator):
    """Three responses (any padding side) with macros of 1-4 tokens and log-ratios spread over [-1.5, 1.5]."""
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 0, 0]], dtype=torch.bool)
    segments = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, -1], [0, 1, 1, 1, 1, 2, 3, 3], [-1, -1, -1, 0, 0, 0, -1, -1]])
    old = torch.randn(mask.shape, generator=generator, dtype=torch.float64) - 2
    engine = old - (torch.rand(mask.shape, generator=generator, dtype=torch.float64) * 3 - 1.5)
    return old, engine, mask, segments


@pytest.mark.parametrize("level", ["token", "macro", "sequence"])
@pytest.mark.parametrize("cap", [1.2, 3.0, 1e6])
def test_importance_weights_match_a_loop_and_their_cap(level, cap):
    old, engine, mask, segments = batch(torch.Generator().manual_seed(0))
    weights = importance_weights(old, engine, mask, level, cap, segments)
    expected = loop_weights((old - engine).tolist(), mask.tolist(), segments.tolist(), level, cap)
    assert torch.allclose(weights, expected, rtol=1e-12, atol=0)
    assert weights[mask].max() <= cap and torch.all(weights[~mask] == 0)
    if cap == 1.2:  # the cap binds somewhere and leaves smaller weights alone
        assert (weights[mask] == cap).any() and (weights[mask] < cap).any()


def test_macro_level_with_one_token_macros_is_the_token_level():
    old, engine, mask, _ = batch(torch.Generator().manual_seed(1))
    singletons = torch.where(mask, mask.long().cumsum(dim=1) - 1, torch.full_like(mask, -1, dtype=torch.long))
    assert torch.equal(importance_weights(old, engine, mask, "macro", 3.0, singletons),
                       importance_weights(old, engine, mask, "token", 3.0))


def test_weights_scale_each_units_clipped_term():
    """policy_loss with weights = the mean over units of w · max(−A·r, −A·clip(r)), for token and macro ratios."""
    generator = torch.Generator().manual_seed(2)
    old, engine, mask, segments = batch(generator)
    new = old + torch.randn(old.shape, generator=generator, dtype=torch.float64) * 0.3
    advantages = torch.randn(old.shape, generator=generator, dtype=torch.float64)
    for level in ("token", "macro"):
        weights = importance_weights(old, engine, mask, level, 2.0, segments)
        loss, _ = policy_loss(new, old, advantages, mask, 0.2, segment_ids=segments, ratio="token", weights=weights)
        ratio = torch.exp(new - old)
        terms = torch.max(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2))
        assert loss.item() == pytest.approx(float((weights * terms)[mask].sum() / mask.sum()), rel=1e-12)
    unweighted, _ = policy_loss(new, old, advantages, mask, 0.2)
    ones = importance_weights(old, engine, mask, "none", 2.0)
    assert policy_loss(new, old, advantages, mask, 0.2, weights=ones)[0].item() == pytest.approx(unweighted.item())


def test_logprob_gap_statistics():
    old, engine, mask, _ = batch(torch.Generator().manual_seed(3))
    gap = logprob_gap(old, engine, mask)
    diff = (old - engine)[mask]
    assert gap["logprob_abs_diff"].item() == pytest.approx(diff.abs().mean().item())
    assert gap["logprob_abs_diff_max"].item() == pytest.approx(diff.abs().max().item())
    assert gap["kl_engine_trainer"].item() == pytest.approx((torch.exp(diff) - 1 - diff).mean().item())


SHIFT = 1.0
"""How much lower than the trainer's the fake engine reports every sampled token's log-prob."""


class ShiftedEngine(HFRolloutEngine):
    """The HF engine reporting engine log-probs exactly ``SHIFT`` below the trainer's: every token's importance
    weight is then e^SHIFT, a macro's e^(SHIFT·length), a response's e^(SHIFT·its length), before the cap."""

    def sample(self, prompts, prompt_mask, sampling, record_entropy):
        rollout = super().sample(prompts, prompt_mask, sampling, record_entropy)
        mask = rollout_masks(rollout.seq, prompt_mask, self.eos_token_id)[0]
        with torch.no_grad():
            logprobs = sequence_logprobs(self.actor.module, rollout.seq, mask, sampling.temperature) - SHIFT
        return Rollout(rollout.seq, rollout.entropy, logprobs)


def run_with_shifted_engine(tmp_path, monkeypatch, flags):
    from dschat.stages import ppo

    monkeypatch.setattr(ppo.RLHFConfig, "check_rollout_engine", lambda self: None)  # no real vLLM built
    monkeypatch.setattr(ppo, "build_rollout_engine", lambda args, actor, tokenizer, world_size, *_: ShiftedEngine(
        actor, tokenizer.pad_token_id, tokenizer.eos_token_id))
    ppo_main(TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "1", "--seed", "5", "--temperature", "1.0",
                         "--rollout_engine", "vllm", *flags])
    return next(r for r in read_metrics(str(tmp_path)) if "loss/policy" in r)


def test_rollout_is_flags_reach_the_policy_loss(tmp_path, monkeypatch):
    """One on-policy update (ratio 1) with every token's weight e^SHIFT: the logged mean weight is min(e^SHIFT·k, C)
    for units of k tokens, and the policy loss is the unweighted run's times that weight (token level, every
    weight equal); the gap metrics read SHIFT."""
    none = run_with_shifted_engine(tmp_path / "none", monkeypatch, [])
    assert "rollout/is_weight_mean" not in none
    assert none["rollout/logprob_abs_diff"] == pytest.approx(SHIFT, abs=1e-5)
    token = run_with_shifted_engine(tmp_path / "token", monkeypatch, ["--rollout_is", "token", "--rollout_is_cap", "50"])
    assert token["rollout/is_weight_mean"] == pytest.approx(math.e, rel=1e-4)
    assert token["loss/policy"] == pytest.approx(math.e * none["loss/policy"], rel=1e-4)
    capped = run_with_shifted_engine(tmp_path / "cap", monkeypatch, ["--rollout_is", "token", "--rollout_is_cap", "1.5"])
    assert capped["rollout/is_weight_mean"] == pytest.approx(1.5, rel=1e-6)
    assert capped["loss/policy"] == pytest.approx(1.5 * none["loss/policy"], rel=1e-4)
    macro = run_with_shifted_engine(tmp_path / "macro", monkeypatch, ["--rollout_is", "macro", "--rollout_is_cap",
                                                                     "1e6", "--ngram", "2", "--max_new_tokens", "6"])
    sequence = run_with_shifted_engine(tmp_path / "seq", monkeypatch, ["--rollout_is", "sequence", "--rollout_is_cap",
                                                                      "1e6", "--max_new_tokens", "6"])
    lengths = macro["response/length"], sequence["response/length"]
    assert lengths == (6, 6), "the random tiny actor is expected to never stop early at 6 tokens"
    assert macro["rollout/is_weight_mean"] == pytest.approx(math.exp(2 * SHIFT), rel=1e-4)
    assert sequence["rollout/is_weight_mean"] == pytest.approx(math.exp(6 * SHIFT), rel=1e-4)


def test_rollout_is_needs_an_engine_with_log_probs(tmp_path, capsys):
    message = one_line_error(ppo_main, TINY_PPO + ["--output_dir", str(tmp_path), "--rollout_is", "token"], capsys)
    assert "--rollout_is token" in message and "--rollout_engine vllm" in message


def test_step_logs_its_phases_timing(tmp_path):
    ppo_main(TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "1"])
    row = next(r for r in read_metrics(str(tmp_path), timings=True) if "loss/policy" in r)
    for phase in ("generate", "weight_sync", "score", "experience", "train"):
        assert row[f"timing/{phase}"] >= 0, phase
    assert row["timing/generate"] > 0 and row["timing/train"] > 0
