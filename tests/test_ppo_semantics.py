"""What a PPO run means, checked through step 3 as users run it (issue 12, "PPO semantics"):

- every LR schedule (actor and critic, warmup included) is sized in the optimizer steps the run takes, so with
  ``--ppo_epochs 2`` (and with mini-batches) the logged LR decays over the whole run.
"""
from __future__ import annotations

import math

import pytest

from conftest import read_metrics
from dschat.cli.ppo import main as ppo_main

TINY_PPO = ["--actor_model_name_or_path", "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
            "--max_prompt_seq_len", "16", "--max_new_tokens", "6", "--per_device_generation_batch_size", "8",
            "--per_device_train_batch_size", "4", "--max_eval_samples", "4", "--per_device_eval_batch_size", "4",
            "--no_progress_bar", "--log_samples", "0", "--log_steps", "1"]
"""Step 3 on random tiny Gemmas (actor, critic and reward model) and the embedded synthetic prompts."""


def scheduled_lr(kind: str, step: int, total: int, warmup: int) -> float:
    """The LR multiplier after ``step`` optimizer steps of a warmup + linear/cosine schedule of ``total`` steps
    (written from the schedules' definitions, independently of ``transformers.get_scheduler``)."""
    if step < warmup:
        return step / warmup
    progress = (step - warmup) / (total - warmup)
    return max(0.0, 1.0 - progress) if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))


@pytest.mark.parametrize("flags, steps_per_iteration, iterations, warmup", [
    (["--ppo_epochs", "2", "--lr_scheduler_type", "linear", "--warmup_steps", "0"], 2, 4, 0),
    (["--ppo_epochs", "2", "--lr_scheduler_type", "cosine", "--warmup_steps", "1"], 2, 4, 2),
], ids=["epochs2-linear", "epochs2-cosine-warmup"])
def test_lr_schedule_spans_the_optimizer_steps_of_the_run(tmp_path, flags, steps_per_iteration, iterations,
                                                          warmup):
    """The LR logged after each PPO iteration is the schedule's value after the optimizer steps taken so far
    (``steps_per_iteration`` per iteration; ``--warmup_steps`` iterations of warmup): it decays monotonically
    over the whole run and reaches 0 only at its end (a schedule sized in iterations hit 0 halfway)."""
    ppo_main(TINY_PPO + flags + ["--output_dir", str(tmp_path), "--max_steps", str(iterations),
                                 "--actor_learning_rate", "1e-3", "--critic_learning_rate", "2e-3"])
    rows = [r for r in read_metrics(str(tmp_path)) if "lr/actor" in r]
    assert [r["step"] for r in rows] == list(range(1, iterations + 1))
    kind = flags[flags.index("--lr_scheduler_type") + 1]
    total = steps_per_iteration * iterations
    for row in rows:
        expected = scheduled_lr(kind, row["step"] * steps_per_iteration, total, warmup)
        assert row["lr/actor"] == pytest.approx(1e-3 * expected, rel=1e-6, abs=1e-12), row["step"]
        assert row["lr/critic"] == pytest.approx(2e-3 * expected, rel=1e-6, abs=1e-12), row["step"]
    actor = [r["lr/actor"] for r in rows]
    assert all(a >= b for a, b in zip(actor[warmup // steps_per_iteration:], actor[warmup // steps_per_iteration + 1:]))
    assert min(actor[:-1]) > 0 and actor[-1] == pytest.approx(0.0, abs=1e-12)
