"""``--async_rollout`` with several optimizer steps per rollout (``--ppo_epochs 2``, two mini-batches): after the
first step π_θ is no longer the proximal policy, so only here does the behaviour weight min(π_prox/π_behav, C)
differ from min(π_θ/π_behav, C) (dschat/rlhf/rollout/producer.py, decoupled PPO)."""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_PPO
from dschat.cli.ppo import main as ppo_main

FLAGS = TINY_PPO + ["--termination", "fixed", "--ngram", "3", "--eval_steps", "0"]


def record_policy_losses(monkeypatch) -> list:
    """``(micro-batch, π_θ log-probs, weights, loss, clip ε)`` of every policy loss the trainer computes."""
    import dschat.rlhf.ppo_trainer as trainer_module

    calls, real_loss, real_losses = [], trainer_module.policy_loss, trainer_module.PPOTrainer.micro_batch_losses

    def micro_batch_losses(self, micro, logprobs, values):
        calls.append({"micro": micro, "logprobs": logprobs.detach().clone(), "eps": self.config.clip_eps})
        return real_losses(self, micro, logprobs, values)

    def policy_loss(*args, **kwargs):
        loss, stats = real_loss(*args, **kwargs)
        calls[-1].update(weights=kwargs["weights"], loss=loss.detach())
        return loss, stats

    monkeypatch.setattr(trainer_module, "policy_loss", policy_loss)
    monkeypatch.setattr(trainer_module.PPOTrainer, "micro_batch_losses", micro_batch_losses)
    return calls


def test_second_epochs_weigh_by_the_proximal_policy_not_the_current_one(tmp_path, monkeypatch):
    """Every optimizer step of 2 epochs × 2 mini-batches on a stale rollout: the weights reaching the loss are
    min(exp(log π_prox − log π_behav), C) per token, recomputed here from the micro-batch's old (proximal) and
    behaviour log-probs, and the loss is the token mean of w · max(−A·u, −A·clip(u, 1 ± ε)), u = π_θ/π_prox —
    while π_θ has moved away from π_prox on later steps (so a weight taken against π_θ would differ)."""
    calls = record_policy_losses(monkeypatch)
    cap = 1.5
    ppo_main(FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "2", "--async_rollout", "1",
                      "--rollout_is", "token", "--rollout_is_cap", str(cap), "--ppo_epochs", "2",
                      "--ppo_mini_batch_size", "2", "--per_device_training_batch_size", "2"])
    assert len(calls) == 2 * 2 * 2
    moved = 0.0
    for call in calls:
        micro, current = call["micro"], call["logprobs"].double()
        on = micro.action_mask.bool()
        prox, behav = micro.logprobs.double(), micro.engine_logprobs.double()
        expected = torch.where(on, torch.exp(prox - behav).clamp(max=cap), torch.zeros_like(prox))
        torch.testing.assert_close(call["weights"].double(), expected, atol=1e-6, rtol=0)
        u = torch.exp(current - prox)
        adv = micro.advantages.double()
        term = torch.maximum(-adv * u, -adv * u.clamp(1 - call["eps"], 1 + call["eps"]))
        assert float(call["loss"]) == pytest.approx(float((expected * term)[on].mean()), abs=1e-6)
        moved = max(moved, float((current - prox)[on].abs().max()))
    assert moved > 1e-2  # π_θ ≠ π_prox on later steps: a weight against π_θ would be another number
