"""DPO baseline (paper Appendix C.3, Table 7): the loss and implicit rewards against an independent computation,
response masks of real pair batches, the Appendix C.3 configs, and a short run that widens the margin."""
from __future__ import annotations

import glob
import math
import os
import re

import pytest
import torch
from transformers import AutoModelForCausalLM

from conftest import BOS, EOS, PAD, SFT_FLAGS, read_metrics, word_tokenizer
from dschat.cli.dpo import build_parser
from dschat.cli.dpo import main as dpo_module_main
from dschat.cli.sft import main as sft_main
from dschat.rlhf.dpo import dpo_loss, implicit_rewards, logprob_positions, response_logprob_sums
from dschat.data import PairCollator, PairDataset, PreferencePair


def test_loss_and_implicit_rewards_match_a_hand_computation():
    beta = 0.1
    policy_chosen, policy_rejected = [-3.0, -5.0, -2.0], [-4.0, -2.0, -6.0]
    reference_chosen, reference_rejected = [-3.5, -5.5, -2.0], [-3.8, -2.5, -5.0]
    expected_losses, chosen_rewards, rejected_rewards = [], [], []
    for pc, pr, rc, rr in zip(policy_chosen, policy_rejected, reference_chosen, reference_rejected):
        chosen_rewards.append(beta * (pc - rc))
        rejected_rewards.append(beta * (pr - rr))
        logit = chosen_rewards[-1] - rejected_rewards[-1]
        expected_losses.append(math.log(1 + math.exp(-logit)))  # -log σ(logit)
    loss, stats = dpo_loss(*(torch.tensor(v) for v in (policy_chosen, policy_rejected, reference_chosen,
                                                      reference_rejected)), beta)
    assert loss.item() == pytest.approx(sum(expected_losses) / 3, rel=1e-6)
    assert stats["chosen_reward"].item() == pytest.approx(sum(chosen_rewards) / 3, rel=1e-6)
    assert stats["rejected_reward"].item() == pytest.approx(sum(rejected_rewards) / 3, rel=1e-6)
    margins = [c - r for c, r in zip(chosen_rewards, rejected_rewards)]
    assert stats["margin"].item() == pytest.approx(sum(margins) / 3, rel=1e-6)
    assert stats["accuracy"].item() == pytest.approx(sum(m > 0 for m in margins) / 3)
    assert implicit_rewards(torch.tensor([-1.0]), torch.tensor([-3.0]), 0.5).tolist() == [1.0]


def test_loss_gradient_raises_chosen_and_lowers_rejected_log_probs():
    chosen, rejected = torch.tensor([-3.0], requires_grad=True), torch.tensor([-3.0], requires_grad=True)
    loss, _ = dpo_loss(chosen, rejected, torch.tensor([-3.0]), torch.tensor([-3.0]), beta=0.1)
    loss.backward()
    assert chosen.grad.item() == pytest.approx(-0.05) and rejected.grad.item() == pytest.approx(0.05)


def test_response_log_probs_sum_over_response_tokens_and_eos_only():
    tokenizer = word_tokenizer()
    pairs = [PreferencePair("q1", " r1 r2", " x"), PreferencePair("q1 q2", " r1", " x x")]
    batch = PairCollator.for_tokenizer(tokenizer)([item for item in PairDataset(pairs, tokenizer, 16)])
    assert batch["input_ids"].tolist() == [[BOS, 4, 6, 7, EOS, PAD], [BOS, 4, 5, 6, EOS, PAD],
                                           [BOS, 4, 8, EOS, PAD, PAD], [BOS, 4, 5, 8, 8, EOS]]
    assert batch["response_mask"].tolist() == [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0],
                                               [0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]]
    token_logprobs = -torch.arange(1.0, 21.0).view(4, 5)  # position t scores token t + 1
    sums = response_logprob_sums(token_logprobs, logprob_positions(batch["response_mask"]))
    assert sums.tolist() == [-(2 + 3 + 4), -(8 + 9), -(12 + 13), -(18 + 19 + 20)]


def test_response_mask_covers_exactly_the_response_text_with_the_shipped_tokenizer(tokenizer):
    pair = PreferencePair("Write a review of the lamp.\nReview:", " The lamp is lovely.", " The lamp is awful.")
    batch = PairCollator.for_tokenizer(tokenizer)([PairDataset([pair], tokenizer, 64)[0]])
    for row, text in enumerate((pair.chosen, pair.rejected)):
        ids = batch["input_ids"][row][batch["response_mask"][row].bool()]
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids[:-1]).strip() == text.strip()


@pytest.mark.parametrize("path", sorted(glob.glob("configs/dpo/*/*.yaml")))
def test_dpo_configs_are_valid_stage_flags_with_the_paper_values(path):
    args = build_parser().parse_config(["--config", path, "--output_dir", "unused"])
    assert args.learning_rate == pytest.approx(2e-7)
    assert args.beta == {"tldr": 0.1, "hh-rlhf": 0.01, "webgpt": 0.1}[os.path.basename(path)[:-5]]


def test_non_positive_beta_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="--beta 0.0"):
        dpo_module_main(["--beta", "0", "--output_dir", str(tmp_path)])


@pytest.mark.parametrize("beta", [0.0, -0.5])
def test_dpo_loss_refuses_a_non_positive_beta_naming_it(beta):
    """The loss's own guard (beside the CLI's): β = 0 is refused too, not only a negative β (mutation: ``<=`` →
    ``<``)."""
    logps = torch.zeros(2)
    with pytest.raises(ValueError, match=re.escape(f"beta must be > 0, got {beta!r}")):
        dpo_loss(logps, logps, logps, logps, beta)


@pytest.mark.parametrize("position", range(3))
def test_dpo_loss_refuses_a_mismatched_shape_naming_the_tensor(position):
    """Each of the three other inputs must have the chosen policy log-probs' shape; the error names it and both
    shapes."""
    names = ("policy_rejected_logps", "reference_chosen_logps", "reference_rejected_logps")
    others = [torch.zeros(2) for _ in names]
    others[position] = torch.zeros(3)
    with pytest.raises(ValueError, match=re.escape(
            f"{names[position]} must have the shape of policy_chosen_logps (2,), got (3,)")):
        dpo_loss(torch.zeros(2), *others, beta=0.1)


@pytest.fixture(scope="module")
def short_sft(tmp_path_factory):
    out = tmp_path_factory.mktemp("dpo_sft")
    sft_main(SFT_FLAGS + ["--output_dir", str(out), "--max_steps", "10", "--max_eval_samples", "16"])
    return str(out)


def test_short_dpo_run_widens_the_margin_and_saves_hf(short_sft, tmp_path):
    final = dpo_module_main(["--model_name_or_path", short_sft, "--output_dir", str(tmp_path), "--max_seq_len", "64",
                             "--per_device_train_batch_size", "8", "--learning_rate", "2e-4", "--warmup_ratio", "0",
                             "--max_steps", "6", "--max_eval_samples", "32", "--per_device_eval_batch_size", "32",
                             "--log_steps", "1", "--no_progress_bar"])
    records = read_metrics(str(tmp_path))
    initial = [r for r in records if "eval/margin" in r][0]
    assert initial["eval/margin"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as the reference
    assert initial["eval/loss"] == pytest.approx(math.log(2), abs=1e-5)
    train_margins = [r["dpo/margin"] for r in records if "dpo/margin" in r]
    assert len(train_margins) == 6 and train_margins[-1] > train_margins[0]
    assert final["margin"] > 0.02 and final["accuracy"] > 0.6 and final["loss"] < math.log(2)
    assert final["chosen_reward"] > final["rejected_reward"]
    assert AutoModelForCausalLM.from_pretrained(tmp_path).config.model_type == "gemma"
