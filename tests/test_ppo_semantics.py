"""What a PPO run means, checked through step 3 as users run it (issue 12, "PPO semantics"):

- every LR schedule (actor and critic, warmup included) is sized in the optimizer steps the run takes, so with
  ``--ppo_epochs 2`` (and with mini-batches) the logged LR decays over the whole run;
- ``--ppo_mini_batch_size`` takes several optimizer steps per rollout (so the ratio leaves 1 and clipping
  engages), in a seeded order, while the default keeps Table 5's one step on the whole rollout's gradient;
- models with dropout run step 3 without it, so the ratio is exactly 1 before any update;
- old, new and reference log-probs are those of the sampling distribution (logits / temperature), or with
  ``--logprobs_at_unit_temperature`` (DeepSpeed-Chat, the paper's released code) of the raw logits.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from conftest import build_trainer, one_line_error, padded_rollout, read_metrics
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.experience import sequence_logprobs, trim_to_longest
from dschat.rlhf.macro_action import policy_loss

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
    (["--ppo_epochs", "2", "--ppo_mini_batch_size", "4", "--lr_scheduler_type", "linear", "--warmup_steps", "0"],
     4, 3, 0),
], ids=["epochs2-linear", "epochs2-cosine-warmup", "epochs2-minibatch4-linear"])
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


def rollout(trainer, seed: int = 2):
    return trim_to_longest(*padded_rollout(trainer.tokenizer, "left", torch.Generator().manual_seed(seed)))


def recorded_losses(trainer, monkeypatch) -> list:
    """The statistics of every micro-batch loss the trainer computes from now on, in order."""
    calls = []
    real = trainer.micro_batch_losses

    def record(micro, logprobs, values):
        actor_loss, critic_loss, stats = real(micro, logprobs, values)
        calls.append({key: float(value) for key, value in stats.items()})
        return actor_loss, critic_loss, stats

    monkeypatch.setattr(trainer, "micro_batch_losses", record)
    return calls


def test_mini_batches_take_several_optimizer_steps_and_engage_clipping(tmp_path, monkeypatch):
    """8 rollout rows, mini-batches of 4 (micro batch 4), 2 epochs: 4 optimizer steps per rollout for the
    actor and the critic (and their schedules); the first mini-batch sees ratio ≡ 1, later ones do not, and
    with a large learning rate clipping engages (impossible with one step per rollout)."""
    trainer = build_trainer(tmp_path, ["--ppo_mini_batch_size", "4", "--ppo_epochs", "2",
                                       "--actor_learning_rate", "3e-2", "--critic_learning_rate", "3e-2"])
    assert not trainer.on_policy and trainer.shuffles
    experience, _ = trainer.experience_from_rollout(*rollout(trainer))
    calls = recorded_losses(trainer, monkeypatch)
    trainer.train_on_experience(experience)
    for engine in (trainer.engines.actor, trainer.engines.critic):
        assert engine.global_steps == 4 and engine.lr_scheduler.last_epoch == 4
    assert len(calls) == 4
    assert calls[0]["policy/ratio_mean"] == 1.0 and calls[0]["policy/approx_kl"] == 0.0
    assert calls[0]["policy/clipfrac"] == 0.0
    assert all(call["policy/approx_kl"] > 0 for call in calls[1:])
    assert max(call["policy/clipfrac"] for call in calls[1:]) > 0


def test_mini_batch_order_is_seeded_and_reshuffled_each_epoch(tmp_path):
    """Each pass draws a fresh permutation of the rows from the trainer's own seeded generator (its state is
    what a checkpoint keeps); the mini-batches of a pass cover every row once."""
    trainer = build_trainer(tmp_path, ["--ppo_mini_batch_size", "2", "--per_device_train_batch_size", "2"])
    experience, _ = trainer.experience_from_rollout(*rollout(trainer))
    state = trainer.state_dict()
    passes = [[tuple(m.seq[:, -1].tolist()) for m in trainer.mini_batches(experience)] for _ in range(2)]
    expected = torch.Generator().manual_seed(1234)
    for mini_batches in passes:
        order = torch.randperm(8, generator=expected)
        assert [row for m in mini_batches for row in m] == experience.seq[order, -1].tolist()
        assert all(len(m) == 2 for m in mini_batches)
    assert passes[0] != passes[1]
    trainer.load_state_dict(state)
    assert [tuple(m.seq[:, -1].tolist()) for m in trainer.mini_batches(experience)] == passes[0]


def test_default_update_is_one_step_on_the_whole_rollout_gradient(tmp_path):
    """Without --ppo_mini_batch_size (Table 5) the update is unchanged: one optimizer step per rollout on the
    mean of the micro-batch gradients — the same parameters as an independent AdamW step on them (gradient norm
    clipped to 1) — and the order generator is never drawn."""
    trainer = build_trainer(tmp_path, ["--recompute_rollout_forwards"])
    assert not trainer.shuffles
    actor = trainer.engines.actor
    reference = copy.deepcopy(actor.module)
    experience, _ = trainer.experience_from_rollout(*rollout(trainer))
    state = trainer.order_generator.get_state()
    trainer.train_on_experience(experience)
    assert actor.global_steps == 1 and torch.equal(trainer.order_generator.get_state(), state)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    for micro in experience.micro_batches(4):
        loss, _ = policy_loss(sequence_logprobs(reference, micro.seq, micro.attention_mask), micro.logprobs,
                              micro.advantages, micro.action_mask, 0.2, segment_ids=micro.segment_ids)
        (loss / 2).backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
    optimizer.step()
    for (name, p), q in zip(actor.module.named_parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-6, rtol=1e-5), name


@pytest.mark.parametrize("flags, message", [
    (["--ppo_mini_batch_size", "3"], "--ppo_mini_batch_size 3 must divide the 8 rollout rows per process"),
    (["--ppo_mini_batch_size", "2"], "--ppo_mini_batch_size 2 must be a multiple of --per_device_train_batch_size 4"),
])
def test_bad_mini_batch_is_one_line_error(tmp_path, capsys, flags, message):
    assert message in one_line_error(ppo_main, TINY_PPO + flags + ["--output_dir", str(tmp_path)], capsys)


def test_gpt2_dropout_is_disabled():
    """Every kind of dropout of a GPT-2 (embedding, attention, residual layers) is off: train mode computes what
    eval mode does, while the model still trains."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from dschat.rlhf.rlhf_engine import disable_dropout

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                       resid_pdrop=0.3, embd_pdrop=0.3, attn_pdrop=0.3))
    ids = torch.randint(50, (2, 10))
    assert not torch.equal(model.train()(ids).logits, model.eval()(ids).logits)
    disable_dropout(model)
    assert torch.equal(model.train()(ids).logits, model.eval()(ids).logits)
    assert model.config.attn_pdrop == 0.3  # the saved config keeps its rates


def test_ratio_is_one_before_any_update_with_attention_dropout(tmp_path, monkeypatch):
    """Actor, reference, critic and reward model built with attention dropout 0.5: the first update forward (train
    mode) reproduces the rollout's old log-probs and values (eval mode) exactly — ratio 1, approx KL 0, no
    clipping (with dropout on, the ratio was already off before any update)."""
    from dschat.model import reward_model, tiny

    real = tiny.tiny_gemma_config

    def with_dropout(tokenizer, **kwargs):
        config = real(tokenizer, **kwargs)
        config.attention_dropout = 0.5
        return config

    monkeypatch.setattr(tiny, "tiny_gemma_config", with_dropout)
    monkeypatch.setattr(reward_model, "tiny_gemma_config", with_dropout)
    trainer = build_trainer(tmp_path, ["--recompute_rollout_forwards"])
    assert trainer.engines.actor.module.config.attention_dropout == 0.5
    trained = (trainer.engines.actor, trainer.engines.critic)
    experience, _ = trainer.experience_from_rollout(*rollout(trainer))
    assert not any(engine.module.training for engine in trained)  # the rollout-time forwards: eval mode
    for micro in experience.micro_batches(4):
        _, _, stats, _ = trainer.micro_batch_pass(micro)
        assert all(engine.module.training for engine in trained)  # the training forwards: train mode
        assert stats["policy/ratio_mean"].item() == 1.0 and stats["policy/approx_kl"].item() == 0.0
        assert stats["policy/clipfrac"].item() == 0.0 and stats["value/clipfrac"].item() == 0.0


def test_step3_refuses_lora_dropout(tmp_path, capsys):
    assert "--lora_dropout 0.1: step 3 runs its models without dropout" in one_line_error(
        ppo_main, TINY_PPO + ["--lora_dropout", "0.1", "--output_dir", str(tmp_path)], capsys)


@pytest.mark.parametrize("flags, temperature", [([], 0.5), (["--logprobs_at_unit_temperature"], 1.0)],
                         ids=["sampling-temperature", "unit-temperature"])
def test_logprobs_use_the_sampling_temperature(tmp_path, flags, temperature):
    """Rollouts sampled at --temperature 0.5: the rollout-time (old), reference and training-forward (new)
    log-probs equal log_softmax(logits / 0.5) gathered at the sampled tokens, computed here from the models'
    logits; with --logprobs_at_unit_temperature they are those of the raw logits."""
    from dschat.model import position_ids

    trainer = build_trainer(tmp_path, ["--temperature", "0.5", "--recompute_rollout_forwards", *flags])
    on_policy = build_trainer(tmp_path, ["--temperature", "0.5", *flags], engines=trainer.engines)
    seq, attention_mask, action_mask = rollout(trainer)

    def expected(engine):
        with torch.no_grad():
            logits = engine.module(input_ids=seq, attention_mask=attention_mask,
                                   position_ids=position_ids(attention_mask)).logits.double()
        logprobs = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
        return logprobs.gather(-1, seq[:, 1:, None]).squeeze(-1)

    actor, ref = expected(trainer.engines.actor), expected(trainer.engines.ref)
    experience, _ = trainer.experience_from_rollout(seq, attention_mask, action_mask)
    assert torch.allclose(experience.logprobs.double(), actor, atol=1e-5)
    assert torch.allclose(experience.ref_logprobs.double(), ref, atol=1e-5)
    reused, _ = on_policy.experience_from_rollout(seq, attention_mask, action_mask)
    for start, micro in zip((0, 4), reused.micro_batches(4)):
        completed = on_policy.micro_batch_pass(micro)[3]  # on-policy: its old log-probs are the training forward's
        assert torch.allclose(completed.logprobs.double(), actor[start:start + 4], atol=1e-5)
        assert micro.logprobs is None  # the micro-batch given is left as it was


def test_step3_refuses_to_train_on_humaneval_the_evaluation_set(tmp_path, capsys):
    message = one_line_error(ppo_main, TINY_PPO + ["--reward", "code", "--data_name", "humaneval", "--output_dir",
                                                   str(tmp_path)], capsys)
    assert "--data_name humaneval" in message and "--allow_eval_set_training" in message
