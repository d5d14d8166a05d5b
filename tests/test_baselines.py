"""Critic-free baselines of step 3 (paper §3.2.3, Appendix C.3): RLOO / GRPO / REINFORCE advantages against
hand computations, the n → ∞ macro-action identity, and ``--algo`` end to end without a critic."""
from __future__ import annotations

import math
import os

import pytest
import torch

import dschat.stages.ppo as step3
import dschat.training.loop as loop
from conftest import read_metrics
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.advantage_estimators import (
    ALGORITHMS,
    MacroGAEEstimator,
    SequenceBaselineEstimator,
    broadcast_to_tokens,
    build_advantage_estimator,
    get_algorithm,
    grpo_advantages,
    reinforce_advantages,
    rloo_advantages,
    sequence_returns,
)
from dschat.rlhf.macro_action import compute_macro_advantages, ngram_segments
from dschat.stages.configs import PPOConfig

# two prompts x K = 3 samples, contiguous
RETURNS = torch.tensor([1.0, 2.0, 6.0, -1.0, -1.0, -1.0])


def test_sequence_return_sums_response_rewards_only():
    rewards = torch.tensor([[9.0, -0.1, -0.2, 1.5, 9.0], [-0.3, 2.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    assert sequence_returns(rewards, mask).tolist() == pytest.approx([1.2, 1.7])


def test_rloo_subtracts_the_leave_one_out_mean_of_each_group():
    expected = [1 - (2 + 6) / 2, 2 - (1 + 6) / 2, 6 - (1 + 2) / 2, 0.0, 0.0, 0.0]
    assert rloo_advantages(RETURNS, 3).tolist() == pytest.approx(expected)
    # RLOO's identity: A_i = K / (K - 1) * (R_i - group mean)
    group_mean = 3.0
    assert rloo_advantages(RETURNS, 3)[:3].tolist() == pytest.approx([1.5 * (r - group_mean) for r in (1, 2, 6)])


def test_grpo_normalises_within_groups_and_zeroes_constant_groups():
    mean, std = 3.0, math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2)  # unbiased std
    advantages = grpo_advantages(RETURNS.double(), 3)
    assert advantages[:3].tolist() == pytest.approx([(r - mean) / (std + 1e-4) for r in (1.0, 2.0, 6.0)],
                                                    rel=1e-12)
    assert advantages[3:].tolist() == [0.0, 0.0, 0.0]
    # a constant group whose float32 mean is off by one ulp (naively: (R - mean) / std = ±0.8) gives exact zeros
    inexact_mean = torch.full((3,), 0.8847743272781372)
    assert inexact_mean.mean() != inexact_mean[0]
    assert grpo_advantages(inexact_mean, 3).tolist() == [0.0, 0.0, 0.0]
    assert grpo_advantages(torch.zeros(4), 2).tolist() == [0.0] * 4


def test_grpo_std_has_trls_floor_so_near_constant_groups_get_small_advantages():
    """Returns differing by 1e-7: (R - mean) / (std + 1e-4) as TRL's GRPOTrainer computes it, ~1e-3, not the
    unit-scale ±0.71 of dividing by the bare std."""
    returns = torch.tensor([1.0, 1.0 + 1e-7], dtype=torch.float64)
    gap = (1.0 + 1e-7) - 1.0  # 1e-7 as float64 represents it
    std = gap / math.sqrt(2)  # unbiased std of two values
    expected = [-gap / 2 / (std + 1e-4), gap / 2 / (std + 1e-4)]
    advantages = grpo_advantages(returns, 2)
    assert advantages.tolist() == pytest.approx(expected, rel=1e-6)  # the float64 mean rounds at ~1e-16
    assert advantages.abs().max() < 1e-3


def test_reinforce_is_rloo_without_its_baseline():
    leave_one_out_means = torch.tensor([4.0, 3.5, 1.5, -1.0, -1.0, -1.0])
    reinforce = reinforce_advantages(RETURNS, 3)
    assert torch.allclose(reinforce, RETURNS)
    assert torch.allclose(reinforce - rloo_advantages(RETURNS, 3), leave_one_out_means)
    assert reinforce_advantages(RETURNS, 3, batch_mean_baseline=True).tolist() == pytest.approx(
        (RETURNS - RETURNS.mean()).tolist())
    assert reinforce_advantages(torch.tensor([2.0, -1.0]), 1).tolist() == [2.0, -1.0]


@pytest.mark.parametrize("estimator, message", [(rloo_advantages, "group_size >= 2"),
                                                 (grpo_advantages, "group_size >= 2")])
def test_group_estimators_reject_single_samples(estimator, message):
    with pytest.raises(ValueError, match=message):
        estimator(RETURNS, 1)


def test_group_size_must_divide_the_batch():
    with pytest.raises(ValueError, match="divide the batch of 6"):
        rloo_advantages(RETURNS, 4)


def test_sequence_advantage_is_broadcast_to_every_response_token():
    """The estimator's token advantages are each row's RLOO advantage on its response tokens, 0 elsewhere."""
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 0]])
    rewards = torch.tensor([[0.0, -0.1, 1.0, 0.0], [0.0, 0.0, -0.2, 3.0], [-0.1, 0.5, 0.0, 0.0],
                            [0.0, 0.0, -2.0, 0.0]])
    estimator = SequenceBaselineEstimator(rloo_advantages, group_size=2)
    advantages, returns, stats = estimator(None, rewards, ngram_segments(mask, None), mask)
    row_returns = [0.9, 2.8, 0.4, -2.0]
    row_advantages = [0.9 - 2.8, 2.8 - 0.9, 0.4 + 2.0, -2.0 - 0.4]
    for row in range(4):
        on = mask[row].bool()
        assert advantages[row][on].tolist() == pytest.approx([row_advantages[row]] * int(on.sum()))
        assert returns[row][on].tolist() == pytest.approx([row_returns[row]] * int(on.sum()))
        assert advantages[row][~on].abs().sum() == 0 and returns[row][~on].abs().sum() == 0
    assert stats["macro/macros_per_response"] == 1
    assert stats["baseline/constant_groups"] == 0
    assert broadcast_to_tokens(torch.tensor([2.0]), torch.tensor([[0, 1, 1]])).tolist() == [[0.0, 2.0, 2.0]]


def test_rloo_is_macro_gae_with_one_macro_per_response_and_the_leave_one_out_value():
    """§3.2.3: with the whole response as one macro (n → ∞), γ = λ = 1 and V ≡ the leave-one-out mean, MA-PPO's
    macro GAE gives exactly RLOO's advantage on every token."""
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1]])
    rewards = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)) * mask
    returns = sequence_returns(rewards, mask)
    leave_one_out = (returns.view(2, 2).sum(dim=1, keepdim=True) - returns.view(2, 2)).view(-1)
    macro_advantages, _, _ = compute_macro_advantages(broadcast_to_tokens(leave_one_out, mask), rewards,
                                                      ngram_segments(mask, None), mask, gamma=1.0, lam=1.0)
    rloo_tokens, _, _ = SequenceBaselineEstimator(rloo_advantages, 2)(None, rewards, ngram_segments(mask, None),
                                                                      mask)
    assert torch.allclose(macro_advantages, rloo_tokens, atol=1e-6)


def test_registry_builds_the_estimator_of_each_algo():
    assert isinstance(build_advantage_estimator(PPOConfig()), MacroGAEEstimator)
    for name in ("rloo", "grpo", "reinforce"):
        estimator = build_advantage_estimator(PPOConfig(algo=name, num_samples_per_prompt=2))
        assert isinstance(estimator, SequenceBaselineEstimator) and estimator.group_size == 2
    assert [name for name, algo in ALGORITHMS.items() if algo.needs_critic] == ["ppo"]
    assert get_algorithm("rloo").default_samples_per_prompt == 4
    with pytest.raises(ValueError, match="--algo 'a2c'"):
        get_algorithm("a2c")
    with pytest.raises(ValueError, match="--reinforce_baseline 'mean'"):
        build_advantage_estimator(PPOConfig(algo="reinforce", reinforce_baseline="mean"))


@pytest.mark.parametrize("flags, message", [
    (["--algo", "rloo", "--num_samples_per_prompt", "1"], "--num_samples_per_prompt 1: --algo rloo needs"),
    (["--algo", "ppo", "--scale_rewards", "none"], "--scale_rewards: a critic-free --algo's knob"),
    (["--algo", "ppo", "--reinforce_baseline", "batch_mean"], "--reinforce_baseline batch_mean"),
    (["--algo", "rloo", "--per_device_generation_batch_size", "3", "--per_device_train_batch_size", "8"],
     "--num_samples_per_prompt 4 must be a multiple"),
])
def test_bad_algorithm_flags_fail_with_one_line(flags, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        ppo_main(["--critic_model_name_or_path", "tiny-gemma", "--output_dir", str(tmp_path)] + flags)


def critic_free_flags(out, algo: str, steps: int = 2) -> list:
    """Step 3 on the embedded default with the tiny Gemma as actor and reward model (a random RM is enough to
    exercise the pipeline): 2 prompts x K = 2 samples per step."""
    return ["--actor_model_name_or_path", "tiny-gemma", "--reward_model_name_or_path", "tiny-gemma",
            "--output_dir", str(out), "--algo", algo, "--num_samples_per_prompt", "2",
            "--max_prompt_seq_len", "32", "--max_new_tokens", "8", "--per_device_generation_batch_size", "2",
            "--per_device_train_batch_size", "2", "--max_steps", str(steps), "--max_eval_samples", "4",
            "--per_device_eval_batch_size", "4", "--warmup_steps", "0", "--no_progress_bar",
            "--log_samples", "0", "--save_steps", "1"]


@pytest.mark.parametrize("algo", ["rloo", "grpo", "reinforce"])
def test_critic_free_algorithms_run_end_to_end_without_a_critic(algo, tmp_path, monkeypatch):
    real_engine = step3.RLHFEngine
    built = []

    def recording_engine(*args, **kwargs):
        built.append(real_engine(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(step3, "RLHFEngine", recording_engine)
    ppo_main(critic_free_flags(tmp_path, algo))
    assert built[0].critic is None
    train = [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]
    assert [r["step"] for r in train] == [1, 2]
    for record in train:
        assert all(math.isfinite(v) for v in record.values())
        assert record["macro/macros_per_response"] == 1
        assert "loss/value" not in record and "lr/critic" not in record
    assert os.path.exists(tmp_path / "actor" / "config.json")
    assert os.path.isfile(tmp_path / "checkpoints" / "step1" / "complete.json")
    assert os.path.isdir(tmp_path / "checkpoints" / "step1" / "actor")
    assert not os.path.exists(tmp_path / "checkpoints" / "step1" / "critic")
    assert not os.path.exists(tmp_path / "critic")


def test_interrupted_critic_free_run_resumes_from_its_actor_checkpoint(tmp_path, monkeypatch):
    """Interrupt right after step 1's (actor-only) checkpoint, resume, and finish steps 2 and 3."""
    real_save = loop.save_checkpoint
    saved = []

    def save_then_die(output_dir, engines, *args, **kwargs):
        real_save(output_dir, engines, *args, **kwargs)
        saved.append(sorted(engines))
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        ppo_main(critic_free_flags(tmp_path, "grpo", steps=3))
    assert saved == [["actor"]]
    monkeypatch.setattr(loop, "save_checkpoint", real_save)
    ppo_main(critic_free_flags(tmp_path, "grpo", steps=3) + ["--resume"])
    assert [r["step"] for r in read_metrics(str(tmp_path)) if "loss/policy" in r] == [1, 2, 3]
    assert not os.path.exists(tmp_path / "critic")
