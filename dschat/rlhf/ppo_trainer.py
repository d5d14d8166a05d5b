"""PPO and MA-PPO (paper §3.2, Algorithm 1): experience → rewards → (macro) advantages → clipped losses.

No macro-action logic lives here: the termination rule comes from the registry and the macro math from
``dschat.rlhf.macro_action``; with ``--ngram 1`` the same code is token-level PPO. The advantage estimator
comes from ``dschat.rlhf.advantage_estimators`` (``--algo``): PPO's macro GAE with a critic, or the critic-free RLOO /
GRPO / REINFORCE baselines (n → ∞, §3.2.3), for which no critic exists and none is touched.
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from functools import partial
from typing import Dict, Optional

import torch
from tqdm.auto import tqdm

from dschat.rlhf.advantage_estimators import build_advantage_estimator
from dschat.rlhf.dynamic_sampling import constant_groups, group_rows, overlong_penalty, pad_columns
from dschat.rlhf.experience import (Experience, SamplingConfig, chunked_rows, decode_responses, macro_view,
                                    rollout_masks, rollout_prompts, sequence_entropy, sequence_logprobs,
                                    trim_to_longest)
from dschat.rlhf.kl import kl_penalty, token_rewards
from dschat.rlhf.macro_action import (correction_statistics, importance_weights, logprob_gap, masked_whiten,
                                     policy_loss, value_loss)
from dschat.rlhf.macro_action.termination import SegmentationBatch
from dschat.rlhf.rollout import Rollout, RolloutEngine
from dschat.rlhf.rollout.hf import HFRolloutEngine
from dschat.core.distributed import all_reduce_mean
from dschat.training.faults import NonFiniteError, any_rank, nonfinite_rows, require_finite
from dschat.model import token_values


def replace_rows(rollout: Rollout, rows: torch.Tensor, fresh: Rollout, fresh_rows: torch.Tensor, pad_token_id: int
                 ) -> Rollout:
    """A new rollout: ``rollout`` whose ``rows`` hold ``fresh``'s ``fresh_rows`` (widths padded to the wider,
    :func:`~dschat.rlhf.dynamic_sampling.pad_columns`); its ``stats`` kept."""
    seq, fresh_seq = pad_columns([rollout.seq, fresh.seq], pad_token_id)
    seq[rows] = fresh_seq[fresh_rows]
    optional = {}
    for name in ("entropy", "engine_logprobs"):
        mine, theirs = getattr(rollout, name), getattr(fresh, name)
        if mine is not None and theirs is not None:
            mine, theirs = pad_columns([mine, theirs], 0.0)
            mine[rows] = theirs[fresh_rows]
        optional[name] = mine
    return Rollout(seq=seq, stats=dict(rollout.stats), **optional)


def _masked_row_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(dim=1)


def old_values(values: Optional[torch.Tensor], logprobs: torch.Tensor) -> torch.Tensor:
    """The old values V(s_t) an advantage estimator reads: the critic's, detached, or zeros shaped like the
    log-probs when the algorithm has no critic (the critic-free estimators read none, §3.2.3)."""
    return torch.zeros_like(logprobs) if values is None else values.detach()


def reuses_training_forward(config, advantage_estimator, micro_batch_size: int, rollout_rows: int
                            ) -> bool:
    """Whether the update is exactly on-policy, so that the rollout-time actor log-prob and critic value
    forwards are redundant and the training forwards supply them (unless ``config.recompute_rollout_forwards``):

    - each rollout of ``rollout_rows`` rows feeds exactly ONE optimizer step (``ppo_epochs`` = 1, one mini-batch:
      gradient accumulation over the whole rollout): every training forward then runs with the sampling
      parameters, so π_old = π and the ratio is identically 1 — its value, not its gradient (∇r = ∇log π), which
      the training forward carries;
    - the advantages of a micro-batch depend on its own rows only (no whitening across the batch, no
      batch-wide baseline, groups of K samples not split): they can be estimated micro-batch by micro-batch
      from those forwards.

    ``config``: step 3's PPO flags (``dschat.stages.configs.PPOConfig``; read, never imported: flags live above).
    """
    return (not config.recompute_rollout_forwards and config.optimizer_steps_per_rollout(rollout_rows) == 1
            and not config.whiten_advantages and advantage_estimator.rows_independent(micro_batch_size))


REWARD_HINT = "check the reward model or reward function"
"""What the one-line stop on non-finite rewards suggests (a learning rate does not make a reward NaN)."""


def drop_nonfinite_rewards(scores: torch.Tensor, action_mask: torch.Tensor, policy: str) -> tuple:
    """``(scores, action_mask, dropped [B] bool)`` with the samples whose score is NaN/±inf dropped: their score
    set to 0 and their response mask cleared, so no loss, reward or advantage reads them (batch shapes stay
    fixed, so every process still steps together). ``policy="stop"`` raises NonFiniteError instead."""
    dropped = nonfinite_rows(scores)
    if policy == "stop" and any_rank(bool(dropped.any()), scores.device):
        raise NonFiniteError(f"{int(dropped.sum())} non-finite reward(s) in this batch (--nonfinite_rewards stop)",
                             hint=REWARD_HINT)
    return (torch.where(dropped, torch.zeros_like(scores), scores),
            action_mask * (~dropped).to(action_mask.dtype).unsqueeze(1), dropped)


class NonfiniteWindow:
    """Stops the run when too many samples were dropped for non-finite rewards: ``fraction`` of the samples of
    the last ``window`` iterations (over all processes). The default (1.0 over 1) stops at an iteration in
    which every sample was dropped: it has no score and would train on nothing."""

    def __init__(self, fraction: float = 1.0, window: int = 1):
        self.fraction = fraction
        self.recent: deque = deque(maxlen=window)

    def observe(self, dropped: torch.Tensor) -> bool:
        """Record an iteration's ``[B]`` dropped flags; True when every sample of it (on every process) was
        dropped. Raises NonFiniteError when the window is full and its dropped fraction reaches the threshold."""
        counts = all_reduce_mean(torch.tensor([float(dropped.sum()), float(dropped.numel())],
                                              device=dropped.device))
        self.recent.append((counts[0].item(), counts[1].item()))
        lost, seen = (sum(column) for column in zip(*self.recent))
        if len(self.recent) == self.recent.maxlen and lost >= self.fraction * seen:
            if self.recent.maxlen == 1 and lost == seen:
                what = f"every sample's reward was non-finite ({int(dropped.sum())} of {dropped.numel()} dropped)"
            else:
                what = (f"{lost / seen:.0%} of the samples of the last {self.recent.maxlen} iterations had "
                        f"non-finite rewards (--nonfinite_stop_fraction {self.fraction:g})")
            raise NonFiniteError(what, hint=REWARD_HINT)
        return counts[0].item() == counts[1].item()


class PPOTrainer:
    """One PPO iteration = ``make_experience`` on a prompt batch, then ``train_on_experience``. ``config``: step 3's
    PPO flags, a ``dschat.stages.configs.PPOConfig`` (the trainer reads its fields and methods; the flags live on
    the stages' floor, above this one, so it is handed one and never imports the class)."""

    def __init__(self, engines, tokenizer, reward_source, termination_rule, config,
                 sampling: SamplingConfig, micro_batch_size: int, rollout_rows: int, world_size: int = 1,
                 rollout_engine: Optional[RolloutEngine] = None, seed: int = 0):
        self.engines = engines
        self.tokenizer = tokenizer
        self.reward_source = reward_source
        self.termination_rule = termination_rule
        self.config = config
        self.sampling = sampling
        self.micro_batch_size = micro_batch_size
        self.world_size = world_size
        self.rollout_engine = rollout_engine or HFRolloutEngine(engines.actor, tokenizer.pad_token_id,
                                                                tokenizer.eos_token_id, world_size=world_size)
        self.advantage_estimator = build_advantage_estimator(config)
        self.on_policy = reuses_training_forward(config, self.advantage_estimator, micro_batch_size, rollout_rows)
        self.mini_batch_size = config.mini_batch_rows(rollout_rows)
        self.shuffles = self.mini_batch_size < rollout_rows
        self.order_generator = torch.Generator().manual_seed(seed)
        self.logprob_temperature = 1.0 if config.logprobs_at_unit_temperature else sampling.temperature
        self.nonfinite_window = NonfiniteWindow(config.nonfinite_stop_fraction, config.nonfinite_stop_window)

    def state_dict(self) -> dict:
        """The mini-batch shuffling generator (in the resume snapshot when the rollout is split)."""
        return {"order_generator": self.order_generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.order_generator.set_state(state["order_generator"])

    @property
    def device(self) -> torch.device:
        return self.engines.actor.device

    def sample(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling: Optional[SamplingConfig] = None,
               record_entropy: bool = False) -> tuple:
        """Responses of the rollout engine to a prompt batch: ``(Rollout, attention_mask, action_mask)``;
        ``record_entropy`` asks for the policy's entropy at each sampled token (if the engine records it)."""
        rollout = self.rollout_engine.generate(prompts, prompt_mask, sampling or self.sampling, record_entropy)
        attention_mask, action_mask = rollout_masks(rollout.seq, prompt_mask, self.tokenizer.eos_token_id)
        return rollout, attention_mask, action_mask

    def critic_values(self, seq: torch.Tensor, attention_mask: torch.Tensor) -> Optional[torch.Tensor]:
        """V(s_t) ``[B, T-1]`` from the critic (with a graph in training mode); None when the algorithm has no
        critic (the one place the trainer asks)."""
        critic = self.engines.critic
        return None if critic is None else token_values(critic.module, seq, attention_mask)[:, :-1]

    def set_training(self, mode: bool) -> None:
        """Train (``True``) or eval mode for every engine the update trains (the actor and any critic)."""
        for engine in self.engines.trained.values():
            engine.train(mode)

    @torch.no_grad()
    def make_experience(self, batch: dict) -> tuple:
        """Algorithm 1, lines 2-9 for a prompt batch: sample (each prompt ``num_samples_per_prompt`` times, in
        contiguous rows, recording the policy's entropy per token), trim to the longest response, score, segment
        and — unless the update is exactly
        on-policy (:func:`reuses_training_forward`), when the training forwards supply them — the old
        log-probs, values and advantages. No-grad forwards run in chunks of the training micro-batch.
        Returns ``(Experience, stats)``."""
        prompts, prompt_mask, meta = rollout_prompts(batch, self.config.num_samples_per_prompt, self.device)
        start = time.perf_counter()
        rollout = self.rollout_engine.next_rollout(prompts, prompt_mask, self.sampling, record_entropy=True)
        sync = self.rollout_engine.last_sync_seconds
        timing = {"timing/weight_sync": sync, "timing/generate": time.perf_counter() - start - sync}
        if self.config.filter_groups:
            start = time.perf_counter()
            rollout = self.refill_constant_groups(rollout, prompts, prompt_mask, meta)
            timing["timing/filter_groups"] = time.perf_counter() - start
        attention_mask, action_mask = rollout_masks(rollout.seq, prompt_mask, self.tokenizer.eos_token_id)
        optional = {name: tensor for name, tensor in (("entropy", rollout.entropy),
                                                      ("engine_logprobs", rollout.engine_logprobs))
                    if tensor is not None}
        seq, attention_mask, action_mask, *trimmed = trim_to_longest(rollout.seq, attention_mask, action_mask,
                                                                      *optional.values())
        experience, stats = self.experience_from_rollout(seq, attention_mask, action_mask, meta=meta,
                                                         **dict(zip(optional, trimmed)))
        stats.update({key: torch.as_tensor(value) for key, value in timing.items()})
        stats.update(rollout.stats)
        return experience, stats

    def rollout_scores(self, rollout: Rollout, prompt_mask: torch.Tensor, meta: Optional[torch.Tensor]
                       ) -> torch.Tensor:
        """``[B]`` scores of a rollout's responses (the reward source's, before any KL or shaping)."""
        attention_mask, action_mask = rollout_masks(rollout.seq, prompt_mask, self.tokenizer.eos_token_id)
        responses = decode_responses(self.tokenizer, rollout.seq, action_mask)
        return self.reward_source(rollout.seq, attention_mask, responses, meta)[0].to(self.device).float()

    @torch.no_grad()
    def refill_constant_groups(self, rollout: Rollout, prompts: torch.Tensor, prompt_mask: torch.Tensor,
                               meta: Optional[torch.Tensor]) -> Rollout:
        """``--filter_groups`` (DAPO's dynamic sampling, :mod:`dschat.rlhf.dynamic_sampling`): the groups whose K
        scores are all equal are sampled again, up to ``--filter_groups_max_tries`` rounds, and each replaced by
        its new samples once those differ; a group still constant after the last round stays (the batch keeps its
        size: every process steps together). Every process samples in a round if any needs to (a process with
        nothing to redo samples its first group and discards it). Counted in ``filter/*`` (fractions of groups:
        constant at first, still constant at the end; rounds taken)."""
        group_size = self.config.num_samples_per_prompt
        constant = constant_groups(self.rollout_scores(rollout, prompt_mask, meta), group_size)
        first, rounds = constant.float().mean(), 0
        while rounds < self.config.filter_groups_max_tries and any_rank(bool(constant.any()), constant.device):
            rounds += 1
            redo = constant.nonzero().squeeze(1) if constant.any() else constant.new_zeros(1, dtype=torch.long)
            rows = group_rows(redo, group_size)
            fresh = self.rollout_engine.generate(prompts[rows], prompt_mask[rows], self.sampling, record_entropy=True)
            fixed = ~constant_groups(self.rollout_scores(fresh, prompt_mask[rows], None if meta is None else
                                                         meta[rows]), group_size) & constant[redo]
            if fixed.any():
                rollout = replace_rows(rollout, group_rows(redo[fixed], group_size), fresh,
                                       group_rows(fixed.nonzero().squeeze(1), group_size), self.tokenizer.pad_token_id)
                constant[redo[fixed]] = False
        rollout.stats.update({"filter/constant_groups_first": first, "filter/constant_groups_kept":
                              constant.float().mean(), "filter/rounds": torch.tensor(float(rounds))})
        return rollout

    @torch.no_grad()
    def experience_from_rollout(self, seq: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor,
                                entropy: Optional[torch.Tensor] = None, meta: Optional[torch.Tensor] = None,
                                engine_logprobs: Optional[torch.Tensor] = None) -> tuple:
        """``make_experience`` after sampling: ``(Experience, stats)`` of a rollout batch (``entropy`` ``[B, T-1]``:
        the policy's entropy at each sampled token, for the entropy rule and ``policy/entropy``, computed here by
        an actor forward when the rule needs it and the engine recorded none; ``engine_logprobs``: the rollout
        engine's sampled-token log-probs, for the rollout correction)."""
        cfg = self.config
        size = self.micro_batch_size
        temperature = self.logprob_temperature
        start = time.perf_counter()
        if entropy is None and getattr(self.termination_rule, "needs_entropy", False):
            self.engines.actor.eval()
            entropy = chunked_rows(partial(sequence_entropy, self.engines.actor.module,
                                           temperature=self.sampling.temperature), size, seq, attention_mask)
        ref_logprobs = chunked_rows(partial(sequence_logprobs, self.engines.ref.module, temperature=temperature),
                                    size, seq, attention_mask)
        responses = decode_responses(self.tokenizer, seq, action_mask)
        scoring = time.perf_counter()
        scores, reward_counts = self.reward_source(seq, attention_mask, responses, meta)
        scoring = time.perf_counter() - scoring
        scores, action_mask, dropped = drop_nonfinite_rewards(scores.to(self.device).float(), action_mask,
                                                              cfg.nonfinite_rewards)
        overlong = overlong_penalty(action_mask.sum(dim=1), self.sampling.max_new_tokens, cfg.overlong_buffer_len,
                                    cfg.overlong_penalty).to(scores.device)
        scores = scores + overlong
        segmentation = self.termination_rule(SegmentationBatch(
            action_mask=action_mask, ref_logprobs=ref_logprobs, response_token_ids=seq[:, 1:],
            tokenizer=self.tokenizer, entropy=entropy))
        experience = Experience(seq=seq, attention_mask=attention_mask, action_mask=action_mask,
                                ref_logprobs=ref_logprobs, scores=scores, segment_ids=segmentation.segment_ids,
                                engine_logprobs=engine_logprobs)
        none_kept = self.nonfinite_window.observe(dropped)
        kept = (~dropped).float()
        scored = {} if none_kept else {  # a step without a single score logs none
            "objective/score": (scores * kept).sum() / kept.sum().clamp(min=1),
            "response/length": action_mask.float().sum() / kept.sum().clamp(min=1)}
        stats = {**scored,
                 **({"reward/overlong_penalty": overlong.mean()} if cfg.overlong_buffer_len else {}),
                 "reward/nonfinite": dropped.float().sum(),
                 "macro/fallback_samples": segmentation.fallback.float().sum(),
                 **({} if entropy is None else {"policy/entropy": _masked_row_sum(entropy, action_mask).sum()
                                                / action_mask.sum().clamp(min=1)}),
                 **{f"reward/{key}": torch.as_tensor(float(value)) for key, value in reward_counts.items()}}
        if not self.on_policy:
            self.set_training(False)
            logprobs = chunked_rows(partial(sequence_logprobs, self.engines.actor.module, temperature=temperature),
                                    size, seq, attention_mask)
            values = chunked_rows(self.critic_values, size, seq, attention_mask)
            experience, estimator_stats = self.with_advantages(experience, logprobs, values)
            stats.update(estimator_stats)
            if cfg.whiten_advantages:
                experience = dataclasses.replace(experience,
                                                 advantages=masked_whiten(experience.advantages, action_mask))
        stats["timing/score"] = torch.as_tensor(scoring)
        stats["timing/experience"] = torch.as_tensor(time.perf_counter() - start - scoring)
        return experience, stats

    def with_advantages(self, experience: Experience, logprobs: torch.Tensor, values: Optional[torch.Tensor]
                        ) -> tuple:
        """``(Experience, estimator stats)``: a NEW experience, ``experience`` (left as it is) completed with the
        old log-probs ``logprobs`` and values ``values`` (detached; zeros without a critic, :func:`old_values`)
        and the per-token rewards (−β·KL plus the clipped score), (macro) advantages and returns estimated from
        them (Algorithm 1, lines 6-9)."""
        cfg = self.config
        logprobs, values = logprobs.detach(), old_values(values, logprobs)
        rewards, _ = token_rewards(logprobs, experience.ref_logprobs, experience.scores, experience.action_mask,
                                   cfg.kl_coef, cfg.reward_clip, cfg.kl_estimator)
        advantages, returns, stats = self.advantage_estimator(values, rewards, experience.segment_ids,
                                                              experience.action_mask)
        return dataclasses.replace(experience, logprobs=logprobs, values=values, rewards=rewards,
                                   advantages=advantages, returns=returns), stats

    def rollout_statistics(self, experience: Experience) -> Dict[str, torch.Tensor]:
        """KL, non-score reward, returns and advantages of a complete experience."""
        cfg = self.config
        mask = experience.action_mask.float()
        kl = kl_penalty(experience.logprobs, experience.ref_logprobs, cfg.kl_estimator) * mask
        tokens = mask.sum().clamp(min=1)
        gap = {} if experience.engine_logprobs is None else {
            f"rollout/{key}": value for key, value in logprob_gap(experience.logprobs, experience.engine_logprobs,
                                                                  experience.action_mask).items()}
        return {
            **gap,
            "objective/kl": kl.sum(dim=1).mean(),
            "objective/non_score_reward": _masked_row_sum(experience.rewards, mask).mean() - experience.scores.clamp(
                -cfg.reward_clip, cfg.reward_clip).mean(),
            "ppo/returns_mean": (experience.returns * mask).sum() / tokens,
            "ppo/advantages_mean": (experience.advantages * mask).sum() / tokens,
        }

    def training_forward(self, micro: Experience) -> tuple:
        """``(logprobs, values or None)`` of a micro-batch under the current actor and critic in training mode,
        graphs attached (values None without a critic)."""
        self.set_training(True)
        return (sequence_logprobs(self.engines.actor, micro.seq, micro.attention_mask, self.logprob_temperature),
                self.critic_values(micro.seq, micro.attention_mask))

    def micro_batch_losses(self, micro: Experience, logprobs: torch.Tensor, values: Optional[torch.Tensor]
                           ) -> tuple:
        """Clipped policy loss and (with a critic) clipped value loss of one complete micro-batch (its old
        log-probs, values and advantages set) given its training forward's ``logprobs`` and ``values``
        (:meth:`training_forward`), graphs attached (Algorithm 1, lines 10-11): ``(actor_loss, critic_loss or
        None, stats)``. Pure: reads ``micro``, writes nothing."""
        cfg = self.config
        stats = {}
        weights = None
        if cfg.rollout_is != "none":
            weights = importance_weights(micro.logprobs, micro.engine_logprobs, micro.action_mask, cfg.rollout_is,
                                         cfg.rollout_is_cap, micro.segment_ids, mode=cfg.rollout_is_mode,
                                         low=cfg.rollout_is_low, agg=cfg.rollout_is_agg)
            stats.update({f"rollout/{cfg.rollout_is}/{key}": value for key, value in correction_statistics(
                weights, micro.logprobs, micro.engine_logprobs, micro.action_mask).items()})
            stats["rollout/is_weight_mean"] = (weights.sum() / micro.action_mask.sum().clamp(min=1)).detach()
        actor_loss, actor_stats = policy_loss(logprobs, micro.logprobs, micro.advantages, micro.action_mask,
                                              cfg.clip_eps, segment_ids=micro.segment_ids, ratio=cfg.ratio,
                                              weights=weights, clip_eps_high=cfg.clip_eps_high,
                                              loss_agg=cfg.loss_agg, norm_length=self.sampling.max_new_tokens)
        stats.update({"loss/policy": actor_loss.detach(),
                      **{f"policy/{k}": torch.as_tensor(v).detach() for k, v in actor_stats.items()}})
        critic_loss = None
        if values is not None:
            critic_loss, critic_stats = value_loss(values, micro.values, micro.returns, micro.action_mask,
                                                   cfg.value_clip)
            stats.update({"loss/value": critic_loss.detach(),
                          **{f"value/{k}": torch.as_tensor(v).detach() for k, v in critic_stats.items()}})
        return actor_loss, critic_loss, stats

    def micro_batch_pass(self, micro: Experience) -> tuple:
        """The training forward and losses of one micro-batch: ``(actor_loss, critic_loss or None, stats,
        complete micro-batch)``. Exactly on-policy (:func:`reuses_training_forward`) the micro-batch arrives
        without old log-probs and values: they ARE this forward's outputs, detached, and its rewards and
        advantages are estimated from them (:meth:`with_advantages`, a new micro-batch), so the ratio is
        identically 1 and the gradients are those of the recomputed-forward path (test_ppo_step_cost). The
        estimator's statistics are left to :meth:`train_on_experience`, over the whole rollout."""
        logprobs, values = self.training_forward(micro)
        if self.on_policy:
            micro, _ = self.with_advantages(micro, logprobs, values)
        return (*self.micro_batch_losses(micro, logprobs, values), micro)

    def mini_batches(self, experience: Experience):
        """One ``--ppo_epochs`` pass: the experience itself (one optimizer step), or with
        ``--ppo_mini_batch_size`` its rows in a fresh seeded order, cut into mini-batches."""
        rows = experience.seq.shape[0]
        if self.mini_batch_size >= rows:
            yield experience
            return
        order = torch.randperm(rows, generator=self.order_generator).to(experience.seq.device)
        for start in range(0, rows, self.mini_batch_size):
            yield experience.select(order[start:start + self.mini_batch_size])

    def train_on_experience(self, experience: Experience) -> Dict[str, torch.Tensor]:
        """``ppo_epochs`` passes over the rollout, one optimizer step per mini-batch (gradients accumulated over its
        micro-batches; DeepSpeed's accumulation boundary is the mini-batch's last micro-batch). Exactly on-policy,
        the experience is completed from the training forwards (old log-probs, values, rewards, advantages,
        returns), so the caller sees the same experience either way, and the same estimator statistics
        (``ppo/values_mean``, ``macro/*``, ``baseline/*``): those of the whole rollout, token-weighted, not a mean
        of micro-batch means."""
        actor, critic = self.engines.actor, self.engines.critic
        history, micros = [], []
        for _ in range(self.config.ppo_epochs):
            for mini_batch in self.mini_batches(experience):
                for micro in mini_batch.micro_batches(self.micro_batch_size):
                    actor_loss, critic_loss, stats, micro = self.micro_batch_pass(micro)
                    require_finite(actor_loss, "policy loss")
                    actor.backward(actor_loss)
                    actor.step()
                    if critic_loss is not None:
                        require_finite(critic_loss, "value loss")
                        critic.backward(critic_loss)
                        critic.step()
                    history.append(stats)
                    micros.append(micro)
        stats = {key: torch.stack([torch.as_tensor(h[key]).float() for h in history]).mean() for key in history[0]}
        if self.on_policy:
            experience.fill_from(micros)
            stats.update(self.advantage_estimator(experience.values, experience.rewards, experience.segment_ids,
                                                  experience.action_mask)[2])
        return stats

    def step(self, batch: dict) -> tuple:
        """One PPO iteration; returns ``(metrics averaged over processes, experience)``."""
        iteration = time.perf_counter()
        experience, stats = self.make_experience(batch)
        start = time.perf_counter()
        stats.update(self.train_on_experience(experience))
        stats["timing/train"] = torch.as_tensor(time.perf_counter() - start)
        self.rollout_engine.mark_stale()  # the actor changed: the engine loads (or a producer is sent) it
        stats["timing/iteration"] = torch.as_tensor(time.perf_counter() - iteration)
        stats.update(self.rollout_statistics(experience))
        stats.update({f"lr/{role}": torch.tensor(engine.get_lr()[0]) for role, engine in self.engines.trained.items()})
        metrics = {key: all_reduce_mean(value.to(self.device).float()).item() for key, value in stats.items()}
        return metrics, experience

    def sample_table(self, experience: Experience, count: int = 2) -> str:
        """A few decoded responses with their macro boundaries and scores (reward-hacking visibility)."""
        lines = []
        for row in range(min(count, experience.seq.shape[0])):
            text = macro_view(self.tokenizer, experience.seq[row], experience.segment_ids[row])
            lines.append(f"[score {experience.scores[row].item():.3f}] {text}")
        return "\n".join(lines)

    @torch.no_grad()
    def evaluate(self, loader, sampling: SamplingConfig, reward_source=None, progress: bool = False,
                 gold_score=None) -> Dict[str, float]:
        """Mean ± std of the score of responses sampled for held-out prompts (paper Table 2's RM score);
        ``progress`` shows a bar over the evaluation batches; ``gold_score`` (text -> float, an embedded task's
        ground truth) adds the mean gold score of the same responses as ``gold``."""
        scores, lengths, golds = [], [], []
        for batch in tqdm(loader, desc="eval", leave=False, disable=not progress):
            prompts = batch["input_ids"].to(self.device)
            prompt_mask = batch["attention_mask"].to(self.device)
            rollout, attention_mask, action_mask = self.sample(prompts, prompt_mask, sampling)
            seq = rollout.seq
            responses = decode_responses(self.tokenizer, seq, action_mask)
            batch_scores, _ = (reward_source or self.reward_source)(seq, attention_mask, responses,
                                                                    batch.get("index"))
            if gold_score is not None:
                golds.extend(gold_score(response) for response in responses)
            scores.append(batch_scores.float().to(self.device))
            lengths.append(action_mask.sum(dim=1).float())
        scores = torch.cat(scores)
        mean = all_reduce_mean(scores.mean())
        std = all_reduce_mean(((scores - mean) ** 2).mean()).sqrt()
        result = {"score": mean.item(), "score_std": std.item(),
                  "response_length": all_reduce_mean(torch.cat(lengths).mean()).item()}
        if gold_score is not None:
            result["gold"] = all_reduce_mean(torch.tensor(golds, device=self.device).mean()).item()
        return result
