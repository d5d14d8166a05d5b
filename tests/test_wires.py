"""Flags reach the maths: step 3 run from its command line, with the rollouts it trained on recorded, must show
each flag's effect as the paper's formula says (checked against the test oracle, tests/macro_oracle.py)."""
from __future__ import annotations

import pytest
import torch

import macro_oracle as oracle
from conftest import read_metrics, record_ppo_steps
from dschat.cli.ppo import main as ppo_main

TINY_PPO = ["--actor_model_name_or_path", "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
            "--max_prompt_seq_len", "16", "--max_new_tokens", "8", "--per_device_generation_batch_size", "4",
            "--per_device_train_batch_size", "4", "--max_steps", "2", "--max_eval_samples", "4",
            "--per_device_eval_batch_size", "4", "--warmup_steps", "0", "--actor_learning_rate", "5e-2",
            "--no_progress_bar", "--log_samples", "0", "--temperature", "1.0"]
"""Step 3 on random tiny Gemmas: 2 PPO iterations of 4 rollouts, an actor learning rate high enough that the
second rollout's policy is measurably away from the reference."""


def run_recorded(tmp_path, monkeypatch, flags: list) -> tuple:
    """``(training rows of metrics.jsonl, the experience of each PPO iteration)`` of ``ppo_main(flags)``."""
    experiences = record_ppo_steps(monkeypatch)
    ppo_main(TINY_PPO + ["--output_dir", str(tmp_path)] + flags)
    return [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r], experiences


@pytest.mark.parametrize("kl_coef,estimator", [(0.3, "k1"), (2.0, "k3")])
def test_kl_coef_estimator_and_reward_clip_reach_the_rewards(tmp_path, monkeypatch, kl_coef, estimator):
    """r_t = -β·KL_t(estimator) plus the score clipped to ±c at the last response token (§3.2, Table 5), with
    β = --kl_coef, KL_t by --kl_estimator and c = --reward_clip from the command line; the logged KL term is
    -β times the logged KL."""
    clip = 0.05  # below the random reward model's scores, so the clip is visible
    rows, experiences = run_recorded(tmp_path, monkeypatch, ["--kl_coef", str(kl_coef), "--kl_estimator", estimator,
                                                             "--reward_clip", str(clip)])
    assert len(rows) == len(experiences) == 2
    last = experiences[-1]
    mask = last.action_mask.float()
    kl_rows = [[oracle.kl_value(lp, ref, estimator) * m for lp, ref, m in zip(*row)]
               for row in zip(last.logprobs.tolist(), last.ref_logprobs.tolist(), mask.tolist())]
    assert max(abs(v) for row in kl_rows for v in row) > 1e-3  # the policy moved: the KL term is not vacuous
    assert (last.scores.abs() > clip).any()
    for experience in experiences:
        expected = oracle.token_rewards(experience.logprobs, experience.ref_logprobs, experience.scores,
                                        experience.action_mask, kl_coef, clip, estimator)
        torch.testing.assert_close(experience.rewards.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-5,
                                   rtol=1e-4)
    row = rows[-1]
    assert row["objective/kl"] == pytest.approx(sum(map(sum, kl_rows)) / len(kl_rows), rel=1e-4, abs=1e-6)
    assert row["objective/non_score_reward"] == pytest.approx(-kl_coef * row["objective/kl"], rel=1e-3, abs=1e-6)
