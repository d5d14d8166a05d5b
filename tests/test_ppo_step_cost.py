"""A PPO step pays only for real tokens and skips redundant forwards, without changing the numbers:

- trimming a rollout to its longest sequence (either padding side, leading and trailing padding) leaves the
  log-probs, values, scores, rewards, advantages, returns and losses of the untrimmed batch unchanged;
- exactly on-policy, taking the old log-probs and values from the training forward gives the losses and
  gradients of the path that recomputes them after generation, and a whole step lands on the same parameters;
- the on-policy predicate admits only updates where that is exact.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import build_trainer, padded_rollout
from dschat.rlhf.advantage_estimators import build_advantage_estimator
from dschat.rlhf.experience import chunked_rows, trim_to_longest
from dschat.stages.configs import PPOConfig
from dschat.rlhf.ppo_trainer import reuses_training_forward


@pytest.mark.parametrize("prompt_side", ["left", "right"])
def test_trim_to_longest_keeps_exactly_the_attended_span(tokenizer, prompt_side):
    seq, attention_mask, action_mask = padded_rollout(tokenizer, prompt_side, torch.Generator().manual_seed(0))
    trimmed_seq, trimmed_attention, trimmed_action = trim_to_longest(seq, attention_mask, action_mask)
    attended = attention_mask.any(dim=0).nonzero().squeeze(1).tolist()
    start, end = attended[0], attended[-1] + 1
    assert (start, end) == ((2, 18) if prompt_side == "left" else (0, 18))
    assert torch.equal(trimmed_seq, seq[:, start:end])
    assert torch.equal(trimmed_attention, attention_mask[:, start:end])
    assert torch.equal(trimmed_action, action_mask[:, start:end - 1])
    # nothing real was dropped: every response token and every attended token survives
    assert trimmed_action.sum() == action_mask.sum() and trimmed_attention.sum() == attention_mask.sum()
    assert trimmed_seq.shape[1] - 1 == trimmed_action.shape[1]


def _compare_on_kept_columns(full, trimmed, start, end):
    for name in ("ref_logprobs", "logprobs", "values", "rewards", "advantages", "returns"):
        a, b = getattr(full, name), getattr(trimmed, name)
        assert torch.allclose(a[:, start:end - 1], b, atol=1e-5, rtol=1e-5), name
        outside = torch.cat([a[:, :start], a[:, end - 1:]], dim=1)
        if name in ("rewards", "advantages", "returns"):
            assert not outside.any(), name  # nothing lies on the dropped padding
    assert torch.allclose(full.scores, trimmed.scores, atol=1e-5)
    assert torch.equal(full.segment_ids[:, start:end - 1], trimmed.segment_ids)


@pytest.mark.parametrize("rule", [["--termination", "fixed", "--ngram", "3"], ["--termination", "ppl"]],
                         ids=["fixed3", "ppl"])
@pytest.mark.parametrize("reuse", [False, True], ids=["rollout-forwards", "on-policy"])
def test_trimming_changes_no_logprob_advantage_or_loss(tmp_path, rule, reuse):
    trainer = build_trainer(tmp_path, rule + ([] if reuse else ["--recompute_rollout_forwards"]))
    assert trainer.on_policy == reuse
    for prompt_side in ("left", "right"):
        seq, attention_mask, action_mask = padded_rollout(trainer.tokenizer, prompt_side,
                                                          torch.Generator().manual_seed(1))
        trimmed_rollout = trim_to_longest(seq, attention_mask, action_mask)
        assert trimmed_rollout[0].shape[1] < seq.shape[1] - 10
        start = int(attention_mask.any(dim=0).nonzero()[0])
        end = start + trimmed_rollout[0].shape[1]
        full, _ = trainer.experience_from_rollout(seq, attention_mask, action_mask)
        trimmed, _ = trainer.experience_from_rollout(*trimmed_rollout)
        losses, completed = [], []
        for experience in (full, trimmed):
            actor_loss, critic_loss, stats, done = trainer.micro_batch_pass(experience)
            losses.append((actor_loss.item(), critic_loss.item(), stats["policy/ratio_mean"].item()))
            assert (experience.logprobs is None) == reuse  # the experience given is left as it was
            completed.append(done)
        _compare_on_kept_columns(*completed, start, end)
        assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-6)
        assert completed[0].advantages[completed[0].action_mask.bool()].abs().sum() > 0  # a non-trivial comparison


def _grads(loss, engine):
    """The gradient ``engine.backward(loss)`` leaves on the parameters (then cleared)."""
    engine.backward(loss)
    grads = [p.grad.clone() for p in engine.module.parameters() if p.grad is not None]
    engine.zero_grad()
    return grads


def test_on_policy_losses_and_gradients_equal_the_recomputed_path(tmp_path):
    """Ratio ≡ 1 with old = the training forward, detached: the clipped policy loss, the clipped value loss and
    both gradients are those of the path whose old log-probs and values come from rollout-time forwards."""
    recomputing = build_trainer(tmp_path, ["--termination", "fixed", "--ngram", "3", "--recompute_rollout_forwards"])
    on_policy = build_trainer(tmp_path, ["--termination", "fixed", "--ngram", "3"], engines=recomputing.engines)
    assert on_policy.on_policy and not recomputing.on_policy
    rollout = trim_to_longest(*padded_rollout(recomputing.tokenizer, "left", torch.Generator().manual_seed(2)))
    reference, _ = recomputing.experience_from_rollout(*rollout)
    reused, _ = on_policy.experience_from_rollout(*rollout)
    assert reused.logprobs is None and reused.values is None and reused.advantages is None
    engines = recomputing.engines
    for micro_ref, micro in zip(reference.micro_batches(4), reused.micro_batches(4)):
        actor_ref, critic_ref, stats_ref, completed_ref = recomputing.micro_batch_pass(micro_ref)
        assert completed_ref is micro_ref  # the rollout-time forwards had completed it
        grads_ref = _grads(actor_ref, engines.actor) + _grads(critic_ref, engines.critic)
        actor, critic, stats, completed = on_policy.micro_batch_pass(micro)
        assert micro.logprobs is None and micro.advantages is None  # the micro-batch given is left as it was
        grads = _grads(actor, engines.actor) + _grads(critic, engines.critic)
        assert len(grads) == len(grads_ref) > 0
        assert stats["policy/ratio_mean"].item() == 1.0 and stats["policy/approx_kl"].item() == 0.0
        assert stats["value/clipfrac"].item() == 0.0
        assert actor.item() == pytest.approx(actor_ref.item(), rel=1e-5, abs=1e-7)
        assert critic.item() == pytest.approx(critic_ref.item(), rel=1e-5, abs=1e-7)
        for name in ("logprobs", "values", "rewards", "advantages", "returns"):
            assert torch.allclose(getattr(completed, name), getattr(micro_ref, name), atol=1e-5), name
        assert all(torch.allclose(g, h, atol=1e-6, rtol=1e-4) for g, h in zip(grads, grads_ref))
        assert any(g.abs().sum() > 0 for g in grads)


def test_on_policy_step_lands_on_the_parameters_of_the_recomputed_path(tmp_path):
    """Two identical runs, one step on the same prompts and seed (two micro-batches, one optimizer step):
    the same metrics and the same updated actor and critic parameters, and the experience is complete."""
    from dschat.data import PromptCollator, PromptDataset

    runs = {}
    for reuse in (False, True):
        trainer = build_trainer(tmp_path, [] if reuse else ["--recompute_rollout_forwards"])
        dataset = PromptDataset(["a short prompt", "good film", "x", "the movie was", "bad", "ok then",
                                 "I liked it", "plot"], trainer.tokenizer, 16)
        batch = PromptCollator.for_tokenizer(trainer.tokenizer)([dataset[i] for i in range(8)])
        torch.manual_seed(7)
        metrics, experience = trainer.step(batch)
        runs[reuse] = (metrics, experience, trainer.engines)
    (metrics_ref, experience_ref, engines_ref), (metrics, experience, engines) = runs[False], runs[True]
    assert torch.equal(experience.seq, experience_ref.seq)
    for name in ("logprobs", "values", "rewards", "advantages", "returns"):
        assert torch.allclose(getattr(experience, name), getattr(experience_ref, name), atol=1e-5), name
    for key in ("loss/policy", "loss/value", "objective/kl", "objective/score", "ppo/advantages_mean",
                "ppo/returns_mean", "ppo/values_mean", "response/length"):
        assert metrics[key] == pytest.approx(metrics_ref[key], rel=1e-4, abs=1e-6), key
    for role in ("actor", "critic"):
        for (name, p), q in zip(getattr(engines, role).module.named_parameters(),
                                getattr(engines_ref, role).module.parameters()):
            assert torch.allclose(p, q, atol=1e-6), (role, name)


@pytest.mark.parametrize("change, micro_batch, expected", [
    ({}, 4, True),
    ({"ppo_mini_batch_size": 8}, 4, True),  # the whole rollout of 8 rows: still one optimizer step
    ({"ppo_mini_batch_size": 4}, 4, False),  # two optimizer steps per rollout
    ({"recompute_rollout_forwards": True}, 4, False),
    ({"ppo_epochs": 2}, 4, False),
    ({"whiten_advantages": True}, 4, False),
    ({"algo": "grpo", "num_samples_per_prompt": 4}, 8, True),
    ({"algo": "grpo", "num_samples_per_prompt": 4}, 6, False),  # a micro-batch would split a group
    ({"algo": "reinforce", "num_samples_per_prompt": 1, "reinforce_baseline": "batch_mean"}, 4, False),
    ({"algo": "reinforce", "num_samples_per_prompt": 1}, 4, True),
])
def test_on_policy_predicate(change, micro_batch, expected):
    config = dataclasses.replace(PPOConfig(), **change)
    assert reuses_training_forward(config, build_advantage_estimator(config), micro_batch, 8) is expected


def test_chunked_rows_equals_one_call():
    x, y = torch.randn(10, 3), torch.randn(10, 3)
    calls = []

    def function(a, b):
        calls.append(a.shape[0])
        return a * b + 1

    assert torch.equal(chunked_rows(function, 4, x, y), x * y + 1)
    assert calls == [4, 4, 2]
