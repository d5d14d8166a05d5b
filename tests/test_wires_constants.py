"""Every wire pinned, round 2 (issue 32): each flag that reaches the maths of step 3 (and DPO's β) is run with a
NON-default value through the trainer the stage builds, and what the trainer computes is checked against an
independent computation (tests/macro_oracle.py, or a few lines written here from the formula).

``ROWS`` is the table: each row names the flags it pins (set to a value other than the default), the extra
flags it needs to make them visible, and a check. ``test_every_flag_that_reaches_the_maths_is_pinned`` enumerates
the config fields that reach the maths and fails for any that is neither pinned by a row (or by one of the
stage-level tests below, ``STAGE_PINS``) nor exempted in ``EXEMPT`` with a reason and the test file that pins it
— so a flag added later fails until it is covered.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Dict, List, Tuple

import pytest
import torch
import torch.nn.functional as F

import macro_oracle as oracle
from conftest import ROOT, build_trainer, padded_rollout, read_metrics, record_ppo_steps

PROMPTS, PROMPT_LEN = 8, 6
LOGPROB_TOL = dict(atol=2e-5, rtol=1e-4)


# ----------------------------------------------------------------------------------------------------------
# Independent pieces (no trainer code): log-probs, values, segmentations
# ----------------------------------------------------------------------------------------------------------

def positions_of(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


@torch.no_grad()
def logits_of(model, seq: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T-1, V]`` float64 logits scoring ``seq[:, 1:]``, from one full forward."""
    out = model(input_ids=seq, attention_mask=attention_mask, position_ids=positions_of(attention_mask),
                use_cache=False)
    return out.logits[:, :-1].double()


def logprobs_at(model, seq, attention_mask, temperature: float) -> torch.Tensor:
    logprobs = torch.log_softmax(logits_of(model, seq, attention_mask) / temperature, dim=-1)
    return logprobs.gather(-1, seq[:, 1:, None]).squeeze(-1)


@torch.no_grad()
def critic_values(critic, seq, attention_mask) -> torch.Tensor:
    """V(s_t) ``[B, T-1]``: the scalar head on every hidden state."""
    hidden = critic.base_model(input_ids=seq, attention_mask=attention_mask,
                               position_ids=positions_of(attention_mask)).last_hidden_state
    return critic.score(hidden).squeeze(-1)[:, :-1].double()


def entropies(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return -(logprobs.exp() * logprobs).sum(dim=-1)


def lengths_of(segment_ids: torch.Tensor) -> List[List[int]]:
    return [oracle.lengths_of_segment_ids(row) for row in segment_ids.tolist()]


def close(actual, expected, **tol):
    torch.testing.assert_close(torch.as_tensor(actual).double(), torch.as_tensor(expected, dtype=torch.float64),
                               **(tol or LOGPROB_TOL))


def differs(a, b, by: float = 1e-3) -> bool:
    return (torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max() > by


# ----------------------------------------------------------------------------------------------------------
# One recorded PPO iteration of the trainer step 3 builds from flags
# ----------------------------------------------------------------------------------------------------------

def prompt_batch(prompts: int = PROMPTS) -> dict:
    """Fixed prompts, some left-padded (the first row is not, so no prompt column is trimmed)."""
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(10, 200, (prompts, PROMPT_LEN), generator=generator)
    mask = torch.ones_like(ids)
    mask[1:3, :2] = 0
    ids[1:3, :2] = 0
    return {"input_ids": ids, "attention_mask": mask}


def run_iteration(tmp_path, monkeypatch, flags: list) -> SimpleNamespace:
    """One PPO iteration (``trainer.step``) of the trainer built from ``flags``, recording, for each micro-batch
    loss, the micro-batch, its stats and the actor's log-probs and the critic's values at that moment computed
    here by independent forwards, plus the HF ``generate`` kwargs of the rollout and the initial actor."""
    trainer = build_trainer(tmp_path, flags)
    args = trainer_args(flags)
    actor, critic = trainer.engines.actor.module, trainer.engines.critic
    initial_actor = copy.deepcopy(actor)
    temperature = 1.0 if args.logprobs_at_unit_temperature else args.temperature
    calls, generations = [], []
    real_losses, real_generate = trainer.micro_batch_losses, actor.generate

    def record_losses(micro, logprobs, values):
        new_logprobs = logprobs_at(trainer.engines.actor.module, micro.seq, micro.attention_mask, temperature)
        new_values = None if critic is None else critic_values(critic.module, micro.seq, micro.attention_mask)
        actor_loss, critic_loss, stats = real_losses(micro, logprobs, values)
        calls.append(SimpleNamespace(micro=micro, logprobs=new_logprobs, values=new_values,
                                     stats={key: float(value) for key, value in stats.items()}))
        return actor_loss, critic_loss, stats

    def record_generate(*a, **kwargs):
        generations.append(kwargs)
        return real_generate(*a, **kwargs)

    monkeypatch.setattr(trainer, "micro_batch_losses", record_losses)
    monkeypatch.setattr(actor, "generate", record_generate)
    batch = prompt_batch(args.per_device_generation_batch_size)
    metrics, experience = trainer.step(batch)
    return SimpleNamespace(trainer=trainer, args=args, batch=batch, calls=calls, generations=generations,
                           metrics=metrics, experience=experience, initial_actor=initial_actor,
                           temperature=temperature)


def trainer_args(flags: list):
    """The resolved step-3 flags of ``build_trainer(flags)`` (K filled in)."""
    from dschat.cli.ppo import build_parser
    from dschat.stages.resolve import resolve_algorithm

    return resolve_algorithm(build_parser().parse_config(
        ["--actor_model_name_or_path", "tiny-gemma", "--output_dir", "x", "--temperature", "1.0", *flags]))


def oracle_rewards(e, kl_coef=0.05, reward_clip=5.0, estimator="k1"):
    return oracle.token_rewards(e.logprobs, e.ref_logprobs, e.scores, e.action_mask, kl_coef, reward_clip, estimator)


# ----------------------------------------------------------------------------------------------------------
# The checks of the table
# ----------------------------------------------------------------------------------------------------------

GAE = {"sigma": "position", "agg": "mean", "gamma": 0.8, "lam": 0.6}
GAE_DEFAULTS = {"sigma": "equal", "agg": "sum", "gamma": 1.0, "lam": 0.95}


def check_macro_gae(run):
    """γ, λ, σ and the macro-reward aggregation reach the advantages and returns (oracle: per-sample, per-macro
    GAE); each alone, put back to its default, would give other numbers."""
    e = run.experience
    segmentation = oracle.fixed_ngram_segmentation(e.action_mask, 3)
    assert e.segment_ids.tolist() == oracle.segment_ids(e.action_mask, segmentation)
    rewards = oracle_rewards(e)
    close(e.rewards, rewards)
    advantages, returns = oracle.macro_advantages(e.values, rewards, e.action_mask, segmentation, **GAE)
    close(e.advantages, advantages)
    close(e.returns, returns)
    for name, default in GAE_DEFAULTS.items():
        other = oracle.macro_advantages(e.values, rewards, e.action_mask, segmentation, **{**GAE, name: default})
        assert differs(other[0], advantages) or differs(other[1], returns), name


def check_clipped_losses(run):
    """ε (policy), the macro ratio and the value clip reach the micro-batch losses: each micro-batch's loss and
    clip fraction equal the oracle's from the actor's log-probs and critic's values at that moment; with ε = 0.2,
    the token ratio or the value clip 0.2 they would not."""
    assert len(run.calls) == 4  # 2 epochs x 2 mini-batches: the ratio leaves 1 from the second on
    seen = {"clipfrac": 0.0, "eps": False, "ratio": False, "value_clip": False}
    for call in run.calls:
        m = call.micro
        segmentation = lengths_of(m.segment_ids)
        loss, clipfrac = oracle.policy_loss(call.logprobs, m.logprobs, m.advantages, m.action_mask, segmentation,
                                            0.05, "macro")
        assert call.stats["loss/policy"] == pytest.approx(loss, rel=1e-4, abs=1e-6)
        assert call.stats["policy/clipfrac"] == pytest.approx(clipfrac, abs=1e-6)
        value = oracle.token_critic_loss(call.values, m.values, m.returns, m.action_mask, 0.03)
        assert call.stats["loss/value"] == pytest.approx(value, rel=1e-4, abs=1e-6)
        seen["clipfrac"] = max(seen["clipfrac"], clipfrac)
        seen["eps"] |= not math.isclose(oracle.policy_loss(call.logprobs, m.logprobs, m.advantages, m.action_mask,
                                                           segmentation, 0.2, "macro")[0], loss, rel_tol=1e-3)
        seen["ratio"] |= not math.isclose(oracle.policy_loss(call.logprobs, m.logprobs, m.advantages, m.action_mask,
                                                             segmentation, 0.05, "token")[0], loss, rel_tol=1e-3)
        seen["value_clip"] |= not math.isclose(oracle.token_critic_loss(call.values, m.values, m.returns,
                                                                        m.action_mask, 0.2), value, rel_tol=1e-3)
    assert seen == {"clipfrac": seen["clipfrac"], "eps": True, "ratio": True, "value_clip": True}
    assert seen["clipfrac"] > 0 and max(call.stats["value/clipfrac"] for call in run.calls) > 0


def check_whitened(run):
    """--whiten_advantages: the advantages are the oracle's macro advantages whitened over the batch's response
    tokens (mean 0, variance 1 there), the returns are not whitened."""
    e = run.experience
    segmentation = oracle.fixed_ngram_segmentation(e.action_mask, 2)
    raw, returns = oracle.macro_advantages(e.values, oracle_rewards(e), e.action_mask, segmentation)
    whitened = oracle.masked_whiten(raw, e.action_mask)
    close(e.advantages, whitened)
    close(e.returns, returns)
    assert differs(whitened, raw, by=1e-2)
    on = e.action_mask.bool()
    assert float(e.advantages[on].mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(e.advantages[on].var(unbiased=False)) == pytest.approx(1.0, abs=1e-4)


GRAD_CLIP, ADAM_BETAS, WEIGHT_DECAY, ACTOR_LR = 0.05, (0.8, 0.9), 0.1, 1e-3


def replay_actor(run, clip: float) -> torch.nn.Module:
    """The actor's updates redone by hand on a copy of the initial actor: for each recorded micro-batch (one per
    mini-batch here) the clipped surrogate's gradient, its global norm clipped to ``clip`` (recording the norm),
    and a torch AdamW step with the flags' betas and weight decay (none on norm weights), constant LR."""
    from dschat.rlhf.macro_action import policy_loss

    model = copy.deepcopy(run.initial_actor).train()
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if not n.endswith("norm.weight")], "weight_decay": WEIGHT_DECAY},
              {"params": [p for n, p in named if n.endswith("norm.weight")], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=ACTOR_LR, betas=ADAM_BETAS)
    model.norms = []
    for call in run.calls:
        m = call.micro
        out = model(input_ids=m.seq, attention_mask=m.attention_mask, position_ids=positions_of(m.attention_mask))
        logits = out.logits[:, :-1].float() / run.temperature
        logprobs = logits.gather(-1, m.seq[:, 1:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        loss, _ = policy_loss(logprobs, m.logprobs, m.advantages, m.action_mask, 0.2, segment_ids=m.segment_ids)
        loss.backward()
        model.norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        optimizer.step()
        optimizer.zero_grad()
    return model


def check_gradient_clipping(run):
    """--gradient_clipping reaches DeepSpeed (the engines' config) and the update: two optimizer steps whose
    gradient norms exceed the threshold give exactly the parameters of a hand-made AdamW replay clipped at it
    (with the flags' Adam betas and weight decay), and not those of a replay clipped at the default 1.0."""
    actor, critic = run.trainer.engines.actor, run.trainer.engines.critic
    assert actor.gradient_clipping() == critic.gradient_clipping() == GRAD_CLIP
    assert len(run.calls) == 2 and actor.global_steps == 2
    clipped = replay_actor(run, GRAD_CLIP)
    assert min(clipped.norms) > 2 * GRAD_CLIP, clipped.norms  # clipping engages at every step
    for (name, p), q in zip(actor.module.named_parameters(), clipped.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=name)
    unclipped = replay_actor(run, 1.0)
    assert max((p - q).abs().max() for p, q in zip(actor.module.parameters(), unclipped.parameters())) > 1e-5


def check_warmup_ratio(run):
    """Without --warmup_steps, the warmup is --warmup_ratio of the run's optimizer steps (10 iterations of one
    step here: ceil(0.5 x 10) = 5): after the first step both models' LR is 1/5 of the peak."""
    assert run.metrics["lr/actor"] == pytest.approx(1e-3 / 5, rel=1e-6)
    assert run.metrics["lr/critic"] == pytest.approx(1e-3 / 5, rel=1e-6)


def sequence_advantages(algo: str, returns: List[float], k: int) -> List[float]:
    """Written from the papers' formulas, per group of K contiguous rows."""
    if algo == "reinforce":
        return list(returns)
    if algo == "reinforce_batch_mean":
        mean = sum(returns) / len(returns)
        return [r - mean for r in returns]
    out = []
    for start in range(0, len(returns), k):
        group = returns[start:start + k]
        mean = sum(group) / k
        if algo == "rloo":
            out += [r - (sum(group) - r) / (k - 1) for r in group]
        else:  # grpo: unbiased std + 1e-4; an all-equal group carries no signal
            std = math.sqrt(sum((r - mean) ** 2 for r in group) / (k - 1))
            out += [0.0 if all(g == group[0] for g in group) else (r - mean) / (std + 1e-4) for r in group]
    return out


def check_algo(algo: str, others: Tuple[str, ...]):
    def check(run):
        """--algo's sequence advantages (and returns) on every response token, from the rewards of the batch;
        the other estimators would give other numbers on the same returns."""
        e = run.experience
        assert run.trainer.engines.critic is None
        rewards = oracle_rewards(e)
        close(e.rewards, rewards)
        mask = e.action_mask.tolist()
        returns = [sum(r for r, m in zip(row, mask_row) if m) for row, mask_row in zip(rewards, mask)]
        k = run.args.num_samples_per_prompt
        advantages = sequence_advantages(algo, returns, k)
        close(e.advantages, [[a if m else 0.0 for m in mask_row] for a, mask_row in zip(advantages, mask)])
        close(e.returns, [[r if m else 0.0 for m in mask_row] for r, mask_row in zip(returns, mask)])
        for other in others:
            assert differs(sequence_advantages(other, returns, k), advantages), other
    return check


def test_estimator_names_a_bad_reinforce_baseline():
    """A programmatic config the CLI would refuse gets a one-line error naming the flag and the choices."""
    from dschat.rlhf.advantage_estimators import build_advantage_estimator
    from dschat.stages.configs import PPOConfig

    with pytest.raises(ValueError, match=r"--reinforce_baseline 'mean': expected one of \('none', 'batch_mean'\)"):
        build_advantage_estimator(PPOConfig(algo="reinforce", reinforce_baseline="mean"))


def check_group_layout(run):
    """K samples per prompt in contiguous rows (also checked for every row of the table by the runner)."""
    assert run.args.num_samples_per_prompt == 2 and run.experience.seq.shape[0] == 2 * 4


ENTROPY_THRESHOLD, ENTROPY_TEMPERATURE = 6.3, 0.7


def check_entropy_rule(run):
    """The entropy rule with --entropy_threshold cuts after every response token whose entropy of the SAMPLING
    distribution (logits / --temperature, recorded while sampling) is at least the threshold, although the
    log-probs are at unit temperature (--logprobs_at_unit_temperature); the default quantile cut, and the
    entropies at the log-prob temperature, would give other macros / another policy/entropy."""
    e = run.experience
    logits = logits_of(run.initial_actor, e.seq, e.attention_mask)
    entropy = entropies(logits, ENTROPY_TEMPERATURE)
    on = e.action_mask.bool()
    expected = oracle_entropy_segments(entropy, on, threshold=ENTROPY_THRESHOLD)
    assert e.segment_ids.tolist() == expected
    assert expected != oracle_entropy_segments(entropy, on, quantile=0.2)
    assert expected != oracle_entropy_segments(entropies(logits, 1.0), on, threshold=ENTROPY_THRESHOLD)
    assert run.metrics["policy/entropy"] == pytest.approx(float(entropy[on].mean()), abs=1e-4)
    assert abs(float(entropies(logits, 1.0)[on].mean()) - float(entropy[on].mean())) > 1e-2
    close(e.logprobs if e.logprobs is not None else run.calls[0].micro.logprobs,
          logprobs_at(run.initial_actor, e.seq, e.attention_mask, 1.0))


def oracle_entropy_segments(entropy, on, threshold=None, quantile=0.2) -> list:
    """Row by row: a macro ends after every response token at or above the cut (the threshold, or the
    ceil(q·L)-th largest response entropy)."""
    out = []
    for row, mask_row in zip(entropy.tolist(), on.tolist()):
        values = [v for v, m in zip(row, mask_row) if m]
        if threshold is not None:
            cut = threshold
        else:
            count = math.ceil(len(values) * quantile)
            cut = sorted(values, reverse=True)[count - 1] if count and values else math.inf
        ids, macro = [], 0
        for v, m in zip(row, mask_row):
            ids.append(macro if m else -1)
            if m and v >= cut:
                macro += 1
        out.append(ids)
    return out


TOP_K, TOP_P, TEMPERATURE, MAX_NEW = 3, 0.6, 0.7, 5


def check_sampling(run):
    """The rollout's sampling flags reach ``generate`` and shape what is drawn: every response token is among the
    top-k of logits / T of the policy that sampled it and inside the top-p nucleus of that truncated
    distribution, and no response is longer than --max_new_tokens."""
    assert len(run.generations) == 1
    kwargs = run.generations[0]
    assert (kwargs["do_sample"], kwargs["temperature"], kwargs["top_k"], kwargs["top_p"],
            kwargs["max_new_tokens"]) == (True, TEMPERATURE, TOP_K, TOP_P, MAX_NEW)
    e = run.experience
    assert int(e.action_mask.sum(dim=1).max()) <= MAX_NEW
    logits = logits_of(run.initial_actor, e.seq, e.attention_mask) / TEMPERATURE
    top = logits.topk(TOP_K, dim=-1)
    ranks_used = set()
    for b, t in e.action_mask.nonzero().tolist():
        token = int(e.seq[b, t + 1])
        assert float(logits[b, t, token]) >= float(top.values[b, t, -1]) - 1e-4, (b, t)
        probs = torch.softmax(top.values[b, t], dim=-1)
        rank = int((top.values[b, t] > logits[b, t, token] + 1e-6).sum())
        assert float(probs[:rank].sum()) < TOP_P + 1e-5, (b, t, probs.tolist(), rank)
        ranks_used.add(rank)
    assert len(ranks_used) > 0


# ----------------------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    id: str
    pins: Tuple[str, ...]
    """The flags this row pins: each must be given a non-default value in ``flags``."""
    flags: Tuple[str, ...]
    check: Callable
    extra: Tuple[str, ...] = field(default=())
    """Flags that only make the pinned ones visible (mini-batches, a learning rate, a rule)."""


OFF_POLICY = ("--ppo_mini_batch_size", "4", "--ppo_epochs", "2", "--actor_learning_rate", "3e-2",
              "--critic_learning_rate", "1e-3")

ROWS = [
    Row("macro-gae", ("gamma", "lam", "sigma", "reward_agg"),
        ("--gamma", "0.8", "--lam", "0.6", "--sigma", "position", "--reward_agg", "mean"), check_macro_gae,
        ("--ngram", "3")),
    Row("clipped-losses", ("clip_eps", "value_clip", "ratio"),
        ("--clip_eps", "0.05", "--value_clip", "0.03", "--ratio", "macro"), check_clipped_losses,
        ("--ngram", "3", *OFF_POLICY)),
    Row("whiten", ("whiten_advantages",), ("--whiten_advantages",), check_whitened, ("--ngram", "2")),
    Row("gradient-clipping", ("gradient_clipping", "adam_beta1", "adam_beta2", "weight_decay"),
        ("--gradient_clipping", str(GRAD_CLIP), "--adam_beta1", str(ADAM_BETAS[0]), "--adam_beta2",
         str(ADAM_BETAS[1]), "--weight_decay", str(WEIGHT_DECAY)), check_gradient_clipping,
        ("--ppo_mini_batch_size", "4", "--lr_scheduler_type", "constant_with_warmup", "--actor_learning_rate",
         str(ACTOR_LR))),
    Row("warmup-ratio", ("warmup_ratio",), ("--warmup_ratio", "0.5"), check_warmup_ratio,
        ("--warmup_steps", "none")),
    Row("grpo", ("algo",), ("--algo", "grpo"), check_algo("grpo", ("rloo", "reinforce")),
        ("--per_device_generation_batch_size", "2")),
    Row("rloo", ("algo", "num_samples_per_prompt"), ("--algo", "rloo", "--num_samples_per_prompt", "2"),
        check_algo("rloo", ("grpo", "reinforce")), ("--per_device_generation_batch_size", "4")),
    Row("reinforce", ("algo",), ("--algo", "reinforce"), check_algo("reinforce", ("reinforce_batch_mean",)),
        ("--per_device_generation_batch_size", "4")),
    Row("reinforce-batch-mean", ("algo", "reinforce_baseline", "num_samples_per_prompt"),
        ("--algo", "reinforce", "--reinforce_baseline", "batch_mean", "--num_samples_per_prompt", "2"),
        check_algo("reinforce_batch_mean", ("reinforce",)), ("--per_device_generation_batch_size", "4")),
    Row("ppo-samples-per-prompt", ("num_samples_per_prompt",), ("--num_samples_per_prompt", "2"),
        check_group_layout, ("--per_device_generation_batch_size", "4")),
    Row("entropy-threshold", ("entropy_threshold", "logprobs_at_unit_temperature", "termination"),
        ("--termination", "entropy", "--entropy_threshold", str(ENTROPY_THRESHOLD), "--logprobs_at_unit_temperature"),
        check_entropy_rule, ("--temperature", str(ENTROPY_TEMPERATURE), "--max_new_tokens", "12")),
    Row("sampling", ("top_k", "top_p", "temperature", "max_new_tokens"),
        ("--top_k", str(TOP_K), "--top_p", str(TOP_P), "--temperature", str(TEMPERATURE), "--max_new_tokens",
         str(MAX_NEW)), check_sampling),
]


def check_rollout_layout(run):
    """Every row: prompts x K rollout rows, the K samples of prompt g in rows gK .. gK+K-1."""
    k = run.args.num_samples_per_prompt
    seq = run.experience.seq
    assert seq.shape[0] == run.batch["input_ids"].shape[0] * k
    assert torch.equal(seq[:, :PROMPT_LEN], run.batch["input_ids"].repeat_interleave(k, dim=0))


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_flag_reaches_the_maths(row, tmp_path, monkeypatch):
    run = run_iteration(tmp_path, monkeypatch, [*row.extra, *row.flags])
    check_rollout_layout(run)
    row.check(run)


# ----------------------------------------------------------------------------------------------------------
# Stage-level wires: the reward model's scores, every generate call of a run, DPO's β
# ----------------------------------------------------------------------------------------------------------

STAGE_FLAGS = ["--actor_model_name_or_path", "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
               "--max_prompt_seq_len", "16", "--max_new_tokens", "6", "--per_device_generation_batch_size", "4",
               "--per_device_train_batch_size", "4", "--max_steps", "2", "--max_eval_samples", "4",
               "--per_device_eval_batch_size", "4", "--warmup_steps", "0", "--no_progress_bar", "--log_samples", "0",
               "--top_k", "4", "--top_p", "0.9", "--temperature", "0.6", "--eval_temperature", "0.3"]


def test_step3_scores_come_from_the_reward_model_and_its_sampling_reaches_every_generate(tmp_path, monkeypatch):
    """Step 3 as run from its command line, with a reward model that differs from the critic: every training
    score is the frozen reward model's (recomputed here from its checkpoint), not the critic's; the rollouts
    sample with --temperature/--top_k/--top_p and the evaluations with --eval_temperature and the same top-k/p."""
    from transformers import GenerationMixin

    from dschat.cli.ppo import main as ppo_main
    from dschat.model import load_reward_model, load_tokenizer, sequence_scores

    tokenizer = load_tokenizer("tiny-gemma")
    reward_dir = tmp_path / "rm"
    load_reward_model("tiny-gemma", tokenizer, seed=99).save_pretrained(reward_dir)
    tokenizer.save_pretrained(reward_dir)
    experiences = record_ppo_steps(monkeypatch)
    generations, real_generate = [], GenerationMixin.generate

    def record_generate(self, *a, **kwargs):
        generations.append({key: kwargs.get(key) for key in ("do_sample", "temperature", "top_k", "top_p")})
        return real_generate(self, *a, **kwargs)

    monkeypatch.setattr(GenerationMixin, "generate", record_generate)
    ppo_main(STAGE_FLAGS + ["--reward_model_name_or_path", str(reward_dir), "--output_dir", str(tmp_path / "out")])
    reward = load_reward_model(str(reward_dir), tokenizer, require_head=True).eval()
    critic = load_reward_model("tiny-gemma", tokenizer, seed=1234).eval()
    assert len(experiences) == 2
    for e in experiences:
        with torch.no_grad():
            expected = sequence_scores(reward, e.seq, e.attention_mask)
            critic_scores = sequence_scores(critic, e.seq, e.attention_mask)
        close(e.scores, expected, atol=1e-5, rtol=1e-4)
        assert differs(critic_scores, expected, by=1e-2)
    train = {"do_sample": True, "temperature": 0.6, "top_k": 4, "top_p": 0.9}
    evaluation = {**train, "temperature": 0.3}
    assert generations == [evaluation, train, train, evaluation]  # eval at the start, 2 iterations, eval at the end


DPO_BETA = 0.5


def test_dpo_beta_reaches_the_training_loss_and_the_evaluation(tmp_path, monkeypatch):
    """DPO with --beta 0.5 (default 0.1): the logged training loss of the second step (the policy has moved) and
    the final evaluation's loss, implicit rewards and margin equal -log σ(β·Δ) and β·(log π − log π_ref) from
    the summed response log-probs the stage computed (recorded), at β = 0.5 and not at 0.1."""
    from dschat.cli.dpo import main as dpo_main
    from dschat.stages import dpo

    calls, real = [], dpo.pair_logps

    def record(model, batch, device):
        grad = torch.is_grad_enabled()
        chosen, rejected = real(model, batch, device)
        calls.append((grad, chosen.detach().double(), rejected.detach().double()))
        return chosen, rejected

    monkeypatch.setattr(dpo, "pair_logps", record)
    final = dpo_main(["--model_name_or_path", "tiny-gemma", "--output_dir", str(tmp_path), "--max_seq_len", "64",
                      "--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--warmup_ratio", "0",
                      "--max_steps", "2", "--max_eval_samples", "4", "--per_device_eval_batch_size", "4",
                      "--log_steps", "1", "--no_progress_bar", "--beta", str(DPO_BETA)])
    pairs = [(calls[i], calls[i + 1]) for i in range(0, len(calls), 2)]  # (policy, reference) per DPO batch
    training = [p for p in pairs if p[0][0]]
    evaluations = [p for p in pairs if not p[0][0]]
    assert len(training) == 2 and len(evaluations) == 2

    def expected(pair, beta):
        (_, pc, pr), (_, rc, rr) = pair
        chosen, rejected = beta * (pc - rc), beta * (pr - rr)
        return {"loss": float(-F.logsigmoid(chosen - rejected).mean()), "chosen_reward": float(chosen.mean()),
                "rejected_reward": float(rejected.mean()), "margin": float((chosen - rejected).mean())}

    final_expected = expected(evaluations[-1], DPO_BETA)
    for key, value in final_expected.items():
        assert final[key] == pytest.approx(value, rel=1e-4, abs=1e-7), key
    assert abs(expected(evaluations[-1], 0.1)["loss"] - final["loss"]) > 1e-5
    step2 = [r for r in read_metrics(str(tmp_path)) if "dpo/loss" in r and r.get("step") == 2][0]
    assert step2["dpo/loss"] == pytest.approx(expected(training[1], DPO_BETA)["loss"], rel=1e-4, abs=1e-7)
    assert abs(expected(training[1], 0.1)["loss"] - step2["dpo/loss"]) > 1e-5


# ----------------------------------------------------------------------------------------------------------
# Metrics that mean the same on every path
# ----------------------------------------------------------------------------------------------------------

def test_rollout_metrics_are_token_weighted_whichever_path_computed_them(tmp_path):
    """``ppo/values_mean`` and the estimator's other rollout statistics (``macro/*``) are the same numbers
    whether the exactly on-policy update computed the values in its training forward, micro-batch by
    micro-batch, or the rollout-time forwards recomputed them: token-weighted over the whole rollout, here with
    micro-batches of 20 and 19 response tokens."""
    flags = ["--ngram", "3"]
    on_policy = build_trainer(tmp_path, flags)
    recompute = build_trainer(tmp_path, [*flags, "--recompute_rollout_forwards"])
    assert on_policy.on_policy and not recompute.on_policy
    rollout = padded_rollout(on_policy.tokenizer, "left", torch.Generator().manual_seed(2))
    tokens = [int(micro.sum()) for micro in rollout[2].split(4)]
    assert tokens[0] != tokens[1]
    values = critic_values(recompute.engines.critic.module, rollout[0], rollout[1])
    mask = rollout[2].double()
    metrics = {}
    for name, trainer in (("on_policy", on_policy), ("recompute", recompute)):
        experience, stats = trainer.experience_from_rollout(*rollout)
        stats.update(trainer.train_on_experience(experience))
        stats.update(trainer.rollout_statistics(experience))
        metrics[name] = {key: float(value) for key, value in stats.items()}
    expected = float((values * mask).sum() / mask.sum())
    for name in metrics:
        assert metrics[name]["ppo/values_mean"] == pytest.approx(expected, rel=1e-5, abs=1e-6), name
    per_micro = [float((v * m).sum() / m.sum()) for v, m in zip(values.split(4), mask.split(4))]
    assert abs(sum(per_micro) / 2 - expected) > 1e-5  # a mean of micro-batch means would differ
    keys = {key for key in metrics["recompute"] if key.startswith(("macro/", "ppo/", "objective/"))}
    assert "macro/macro_length_mean" in keys and "ppo/values_mean" in keys
    for key in sorted(keys):
        assert metrics["on_policy"][key] == pytest.approx(metrics["recompute"][key], rel=1e-5, abs=1e-6), key


# ----------------------------------------------------------------------------------------------------------
# By construction: every flag that reaches the maths is pinned or exempted with a reason
# ----------------------------------------------------------------------------------------------------------

STAGE_PINS: Dict[str, Tuple[str, ...]] = {
    "test_step3_scores_come_from_the_reward_model_and_its_sampling_reaches_every_generate":
        ("reward_model_name_or_path", "eval_temperature", "top_k", "top_p", "temperature"),
    "test_dpo_beta_reaches_the_training_loss_and_the_evaluation": ("beta",),
}
"""Flags pinned by the stage-level tests of this file (their values are non-default there)."""

EXEMPT: Dict[str, Tuple[str, str]] = {
    "kl_coef": ("the per-token rewards against the oracle (round 1)", "tests/test_wires.py"),
    "kl_estimator": ("the per-token rewards against the oracle (round 1)", "tests/test_wires.py"),
    "reward_clip": ("the per-token rewards against the oracle (round 1)", "tests/test_wires.py"),
    "ngram": ("the segmentation of each rule end to end (round 1)", "tests/test_stage_ppo.py"),
    "random_lengths": ("the rule options step 3 makes of the flags", "tests/test_viewer.py"),
    "random_repeat": ("the rule options step 3 makes of the flags", "tests/test_viewer.py"),
    "parser": ("the rule options step 3 makes of the flags; the parsing rule", "tests/test_parsing_termination.py"),
    "parser_cutoff": ("the rule options step 3 makes of the flags", "tests/test_viewer.py"),
    "entropy_quantile": ("the rollout's entropies reach the quantile rule", "tests/test_entropy_termination.py"),
    "turn_ngram": ("the turn rule built from step 3's flags against hand-written segments",
                   "tests/test_multi_turn.py"),
    "step_delimiter": ("the rule options step 3 makes of the flags; the step rule's cuts", "tests/test_step_termination.py"),
    "step_min_tokens": ("the rule options step 3 makes of the flags; the step rule's cuts", "tests/test_step_termination.py"),
    "ppo_epochs": ("optimizer steps, LR schedule and clipping per epoch", "tests/test_ppo_semantics.py"),
    "ppo_mini_batch_size": ("optimizer steps and the seeded order of mini-batches", "tests/test_ppo_semantics.py"),
    "recompute_rollout_forwards": ("changes no number, only which forward supplies it: both paths agree "
                                   "(test_rollout_metrics_are_token_weighted_whichever_path_computed_them, and "
                                   "the gradients)", "tests/test_ppo_semantics.py"),
    "nonfinite_rewards": ("drop / stop on NaN scores", "tests/test_faults_nonfinite.py"),
    "nonfinite_stop_fraction": ("the stop threshold", "tests/test_faults_nonfinite.py"),
    "nonfinite_stop_window": ("the stop window", "tests/test_faults_nonfinite.py"),
    "rollout_is": ("each level's importance weights on a real update (fake engine 1 nat off)",
                   "tests/test_rollout_correction.py"),
    "rollout_is_cap": ("the cap at 1.5 and 50 on a real update", "tests/test_rollout_correction.py"),
    **{name: ("the objective's flags on a real update against a loop (issue 49)", "tests/test_objective.py")
       for name in ("clip_eps_high", "loss_agg", "scale_rewards", "filter_groups", "filter_groups_max_tries",
                    "overlong_buffer_len", "overlong_penalty", "rollout_is_mode", "rollout_is_low", "rollout_is_agg")},
    "max_prompt_seq_len": ("which prompts are kept (data), not the maths", "tests/test_stage_ppo.py"),
    "eval_seed": ("the evaluation's sampling noise", "tests/test_stage_ppo.py"),
    "actor_learning_rate": ("the logged LR schedules of both models", "tests/test_ppo_semantics.py"),
    "critic_learning_rate": ("the logged LR schedules of both models", "tests/test_ppo_semantics.py"),
    "lr_scheduler_type": ("the logged LR schedules in optimizer steps", "tests/test_ppo_semantics.py"),
    "warmup_steps": ("the logged LR schedules in optimizer steps", "tests/test_ppo_semantics.py"),
    "num_train_epochs": ("the loop's length, not the maths of an iteration", "tests/test_loop.py"),
    "max_steps": ("the loop's length, not the maths of an iteration", "tests/test_loop.py"),
}
"""Flags that reach the maths but are pinned elsewhere (the file must name the flag), or reach only the loop."""


def maths_fields() -> Dict[str, object]:
    """Every config field that reaches step 3's maths (PPO constants, termination, sampling, optimisation, the
    learning rates and the reward model) and DPO's own: name -> default."""
    from dschat.stages.configs import (DPOConfig, PPOConfig, RLHFConfig, SamplingArgs, ScheduleArgs, SupervisedArgs,
                                       TerminationConfig)

    names = {f.name for cls in (PPOConfig, TerminationConfig, SamplingArgs, ScheduleArgs)
             for f in dataclasses.fields(cls)}
    names |= {"actor_learning_rate", "critic_learning_rate", "reward_model_name_or_path"}
    defaults = {f.name: f.default for f in dataclasses.fields(RLHFConfig)}
    shared = {f.name for f in dataclasses.fields(SupervisedArgs)}
    dpo_own = {f.name: f.default for f in dataclasses.fields(DPOConfig) if f.name not in shared}
    return {**{name: defaults[name] for name in names}, **dpo_own}


def pinned_by_rows() -> Dict[str, str]:
    pins = {name: f"row {row.id}" for row in ROWS for name in row.pins}
    pins.update({name: test for test, names in STAGE_PINS.items() for name in names})
    return pins


def test_every_flag_that_reaches_the_maths_is_pinned():
    """A field of the configs above that no row pins and that is not exempted (with the file that pins it) fails
    here; so does a row whose pinned flag keeps its default, or an exemption whose file never names the flag."""
    from dschat.cli.ppo import build_parser

    fields = maths_fields()
    assert "beta" in fields and "clip_eps" in fields and "entropy_threshold" in fields  # the enumeration works
    pinned = pinned_by_rows()
    missing = sorted(set(fields) - set(pinned) - set(EXEMPT))
    assert not missing, f"flags that reach the maths but no test pins: {missing}"
    assert not set(pinned) & set(EXEMPT), sorted(set(pinned) & set(EXEMPT))
    assert not (set(pinned) | set(EXEMPT)) - set(fields), sorted((set(pinned) | set(EXEMPT)) - set(fields))
    for name, (reason, path) in EXEMPT.items():
        with open(f"{ROOT}/{path}") as handle:
            assert name in handle.read(), f"{name}: exempted as pinned by {path}, which never names it"
    for row in ROWS:
        args = build_parser().parse_config(["--output_dir", "x", *row.extra, *row.flags])
        for name in row.pins:
            assert getattr(args, name) != fields[name], f"row {row.id} pins --{name} at its default"
            assert f"--{name}" in row.flags, f"row {row.id} pins --{name} without setting it"
    stage = STAGE_FLAGS + ["--reward_model_name_or_path", "tiny-gemma"]
    args = build_parser().parse_config(["--output_dir", "x", *stage])
    for name in STAGE_PINS["test_step3_scores_come_from_the_reward_model_and_its_sampling_reaches_every_generate"]:
        assert getattr(args, name) != fields[name], name
    assert DPO_BETA != fields["beta"]
