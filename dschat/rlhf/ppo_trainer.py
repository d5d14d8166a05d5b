"""PPO and MA-PPO (paper §3.2, Algorithm 1): experience → rewards → (macro) advantages → clipped losses.

No macro-action logic lives here: the termination rule comes from the registry and the macro math from
``dschat.rlhf.macro_action``; with ``--ngram 1`` the same code is token-level PPO. The advantage estimator
comes from ``dschat.rlhf.baselines`` (``--algo``): PPO's macro GAE with a critic, or the critic-free RLOO /
GRPO / REINFORCE baselines (n → ∞, §3.2.3), for which no critic exists and none is touched.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from tqdm.auto import tqdm

from dschat.rlhf.baselines import build_advantage_estimator
from dschat.rlhf.experience import (
    Experience,
    SamplingConfig,
    decode_responses,
    generate,
    macro_view,
    rollout_masks,
    sequence_logprobs,
)
from dschat.rlhf.kl import token_rewards
from dschat.rlhf.macro_action import masked_whiten, policy_loss, value_loss
from dschat.rlhf.macro_action.termination import SegmentationBatch
from dschat.rlhf.ppo_config import PPOConfig
from dschat.utils.distributed import all_reduce_mean
from dschat.utils.model import token_values


def _masked_row_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(dim=1)


class PPOTrainer:
    """One PPO iteration = ``make_experience`` on a prompt batch, then ``train_on_experience``."""

    def __init__(self, engines, tokenizer, reward_source, termination_rule, config: PPOConfig,
                 sampling: SamplingConfig, micro_batch_size: int, world_size: int = 1,
                 gather_for_generation: bool = True):
        self.engines = engines
        self.tokenizer = tokenizer
        self.reward_source = reward_source
        self.termination_rule = termination_rule
        self.config = config
        self.sampling = sampling
        self.micro_batch_size = micro_batch_size
        self.world_size = world_size
        self.gather_for_generation = gather_for_generation
        self.advantage_estimator = build_advantage_estimator(config)

    @property
    def device(self) -> torch.device:
        return self.engines.actor.device

    def sample(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling: Optional[SamplingConfig] = None):
        """Responses to a prompt batch: ``(seq, attention_mask, action_mask)``."""
        seq = generate(self.engines.actor, prompts, prompt_mask, sampling or self.sampling,
                       self.tokenizer.pad_token_id, self.tokenizer.eos_token_id,
                       gather_parameters=self.gather_for_generation, world_size=self.world_size)
        attention_mask, action_mask = rollout_masks(seq, prompt_mask, self.tokenizer.eos_token_id)
        return seq, attention_mask, action_mask

    @torch.no_grad()
    def critic_values(self, seq: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """V(s_t) ``[B, T-1]`` from the critic; zeros when the algorithm has no critic (nothing reads them)."""
        critic = self.engines.critic
        if critic is None:
            return torch.zeros(seq.shape[0], seq.shape[1] - 1, device=seq.device)
        critic.eval()
        return token_values(critic.module, seq, attention_mask)[:, :-1]

    @torch.no_grad()
    def make_experience(self, batch: dict) -> tuple:
        """Algorithm 1, lines 2-9 for a prompt batch: sample (each prompt ``num_samples_per_prompt`` times, in
        contiguous rows), score, segment, estimate advantages. Returns ``(Experience, stats)``."""
        cfg = self.config
        samples = cfg.num_samples_per_prompt
        prompts = batch["input_ids"].to(self.device).repeat_interleave(samples, dim=0)
        prompt_mask = batch["attention_mask"].to(self.device).repeat_interleave(samples, dim=0)
        meta = batch.get("index")
        if meta is not None:
            meta = meta.repeat_interleave(samples, dim=0)
        seq, attention_mask, action_mask = self.sample(prompts, prompt_mask)
        self.engines.actor.eval()
        logprobs = sequence_logprobs(self.engines.actor.module, seq, attention_mask)
        ref_logprobs = sequence_logprobs(self.engines.ref.module, seq, attention_mask)
        values = self.critic_values(seq, attention_mask)
        responses = decode_responses(self.tokenizer, seq, action_mask)
        scores, reward_counts = self.reward_source(seq, attention_mask, responses, meta)
        scores = scores.to(self.device).float()
        rewards, kl = token_rewards(logprobs, ref_logprobs, scores, action_mask, cfg.kl_coef, cfg.reward_clip,
                                    cfg.kl_estimator)
        segmentation = self.termination_rule(SegmentationBatch(
            action_mask=action_mask, ref_logprobs=ref_logprobs, response_token_ids=seq[:, 1:],
            tokenizer=self.tokenizer))
        advantages, returns, estimator_stats = self.advantage_estimator(values, rewards, segmentation.segment_ids,
                                                                        action_mask)
        if cfg.whiten_advantages:
            advantages = masked_whiten(advantages, action_mask)
        mask = action_mask.float()
        experience = Experience(seq=seq, attention_mask=attention_mask, action_mask=action_mask, logprobs=logprobs,
                                ref_logprobs=ref_logprobs, values=values, rewards=rewards, scores=scores,
                                segment_ids=segmentation.segment_ids, advantages=advantages, returns=returns)
        stats = {
            "objective/score": scores.mean(),
            "objective/kl": _masked_row_sum(kl, mask).mean(),
            "objective/non_score_reward": _masked_row_sum(rewards, mask).mean() - scores.clamp(
                -cfg.reward_clip, cfg.reward_clip).mean(),
            "ppo/returns_mean": (returns * mask).sum() / mask.sum().clamp(min=1),
            "ppo/advantages_mean": (advantages * mask).sum() / mask.sum().clamp(min=1),
            "response/length": mask.sum(dim=1).mean(),
            "macro/fallback_samples": segmentation.fallback.float().sum(),
            **{key: torch.as_tensor(value, dtype=torch.float32) for key, value in estimator_stats.items()},
            **{f"reward/{key}": torch.as_tensor(float(value)) for key, value in reward_counts.items()},
        }
        return experience, stats

    def critic_update(self, micro: Experience) -> Dict[str, torch.Tensor]:
        """Clipped value update on one micro-batch (Algorithm 1, line 11); nothing without a critic."""
        critic = self.engines.critic
        if critic is None:
            return {}
        critic.train()
        values = token_values(critic.module, micro.seq, micro.attention_mask)[:, :-1]
        critic_loss, critic_stats = value_loss(values, micro.values, micro.returns, micro.action_mask,
                                               self.config.value_clip)
        critic.backward(critic_loss)
        critic.step()
        return {"loss/value": critic_loss.detach(),
                **{f"value/{k}": torch.as_tensor(v).detach() for k, v in critic_stats.items()}}

    def train_on_experience(self, experience: Experience) -> Dict[str, torch.Tensor]:
        """Clipped policy and (with a critic) value updates (Algorithm 1, lines 10-11), ``ppo_epochs`` passes,
        gradient accumulation over micro-batches so each engine steps once per pass."""
        cfg = self.config
        actor = self.engines.actor
        actor.train()
        history = []
        for _ in range(cfg.ppo_epochs):
            for micro in experience.micro_batches(self.micro_batch_size):
                logprobs = sequence_logprobs(actor, micro.seq, micro.attention_mask)
                actor_loss, actor_stats = policy_loss(
                    logprobs, micro.logprobs, micro.advantages, micro.action_mask, cfg.clip_eps,
                    segment_ids=micro.segment_ids, ratio=cfg.ratio)
                actor.backward(actor_loss)
                actor.step()
                critic_stats = self.critic_update(micro)
                history.append({"loss/policy": actor_loss.detach(),
                                **{f"policy/{k}": torch.as_tensor(v).detach() for k, v in actor_stats.items()},
                                **critic_stats})
        return {key: torch.stack([h[key].float() for h in history]).mean() for key in history[0]}

    def step(self, batch: dict) -> tuple:
        """One PPO iteration; returns ``(metrics averaged over processes, experience)``."""
        experience, stats = self.make_experience(batch)
        stats.update(self.train_on_experience(experience))
        stats["lr/actor"] = torch.tensor(self.engines.actor.get_lr()[0])
        if self.engines.critic is not None:
            stats["lr/critic"] = torch.tensor(self.engines.critic.get_lr()[0])
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
    def evaluate(self, loader, sampling: SamplingConfig, reward_source=None, progress: bool = False
                 ) -> Dict[str, float]:
        """Mean ± std of the score of responses sampled for held-out prompts (paper Table 2's RM score);
        ``progress`` shows a bar over the evaluation batches."""
        scores, lengths = [], []
        for batch in tqdm(loader, desc="eval", leave=False, disable=not progress):
            prompts = batch["input_ids"].to(self.device)
            prompt_mask = batch["attention_mask"].to(self.device)
            seq, attention_mask, action_mask = self.sample(prompts, prompt_mask, sampling)
            responses = decode_responses(self.tokenizer, seq, action_mask)
            batch_scores, _ = (reward_source or self.reward_source)(seq, attention_mask, responses,
                                                                    batch.get("index"))
            scores.append(batch_scores.float().to(self.device))
            lengths.append(action_mask.sum(dim=1).float())
        scores = torch.cat(scores)
        mean = all_reduce_mean(scores.mean())
        std = all_reduce_mean(((scores - mean) ** 2).mean()).sqrt()
        return {"score": mean.item(), "score_std": std.item(),
                "response_length": all_reduce_mean(torch.cat(lengths).mean()).item()}
