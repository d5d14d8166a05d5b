"""PPO and MA-PPO (paper §3.2, Algorithm 1): experience → rewards → (macro) advantages → clipped losses.

No macro-action logic lives here: the termination rule comes from the registry and the macro math from
``dschat.rlhf.macro_action``; with ``--ngram 1`` the same code is token-level PPO.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch

from dschat.rlhf.experience import (Experience, SamplingConfig, decode_responses, generate, macro_view,
                                    rollout_masks, sequence_logprobs)
from dschat.rlhf.kl import token_rewards
from dschat.rlhf.macro_action import compute_macro_advantages, masked_whiten, policy_loss, value_loss
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
    def make_experience(self, batch: dict) -> tuple:
        """Algorithm 1, lines 2-9 for a prompt batch: sample, score, segment, pool, GAE. Returns
        ``(Experience, stats)``."""
        cfg = self.config
        prompts = batch["input_ids"].to(self.device)
        prompt_mask = batch["attention_mask"].to(self.device)
        seq, attention_mask, action_mask = self.sample(prompts, prompt_mask)
        self.engines.actor.eval()
        self.engines.critic.eval()
        logprobs = sequence_logprobs(self.engines.actor.module, seq, attention_mask)
        ref_logprobs = sequence_logprobs(self.engines.ref.module, seq, attention_mask)
        values = token_values(self.engines.critic.module, seq, attention_mask)[:, :-1]
        responses = decode_responses(self.tokenizer, seq, action_mask)
        scores, reward_counts = self.reward_source(seq, attention_mask, responses, batch.get("index"))
        scores = scores.to(self.device).float()
        rewards, kl = token_rewards(logprobs, ref_logprobs, scores, action_mask, cfg.kl_coef, cfg.reward_clip,
                                    cfg.kl_estimator)
        segmentation = self.termination_rule(SegmentationBatch(
            action_mask=action_mask, ref_logprobs=ref_logprobs, response_token_ids=seq[:, 1:],
            tokenizer=self.tokenizer))
        advantages, returns, macro_stats = compute_macro_advantages(
            values, rewards, segmentation.segment_ids, action_mask, sigma=cfg.sigma, reward_agg=cfg.macro_reward,
            gamma=cfg.gamma, lam=cfg.lam)
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
            "ppo/values_mean": (values * mask).sum() / mask.sum().clamp(min=1),
            "response/length": mask.sum(dim=1).mean(),
            "macro/fallback_samples": segmentation.fallback.float().sum(),
            **{f"macro/{key}": torch.as_tensor(value, dtype=torch.float32) for key, value in macro_stats.items()},
            **{f"reward/{key}": torch.as_tensor(float(value)) for key, value in reward_counts.items()},
        }
        return experience, stats

    def train_on_experience(self, experience: Experience) -> Dict[str, torch.Tensor]:
        """Clipped policy and critic updates (Algorithm 1, lines 10-11), ``ppo_epochs`` passes, gradient
        accumulation over micro-batches so each engine steps once per pass."""
        cfg = self.config
        actor, critic = self.engines.actor, self.engines.critic
        actor.train()
        critic.train()
        history = []
        for _ in range(cfg.ppo_epochs):
            for micro in experience.micro_batches(self.micro_batch_size):
                logprobs = sequence_logprobs(actor, micro.seq, micro.attention_mask)
                actor_loss, actor_stats = policy_loss(
                    logprobs, micro.logprobs, micro.advantages, micro.action_mask, cfg.clip_ratio,
                    segment_ids=micro.segment_ids, ratio=cfg.ma_ratio)
                actor.backward(actor_loss)
                actor.step()
                values = token_values(critic.module, micro.seq, micro.attention_mask)[:, :-1]
                critic_loss, critic_stats = value_loss(values, micro.values, micro.returns, micro.action_mask,
                                                       cfg.value_clip)
                critic.backward(critic_loss)
                critic.step()
                history.append({"loss/policy": actor_loss.detach(), "loss/value": critic_loss.detach(),
                                **{f"policy/{k}": torch.as_tensor(v).detach() for k, v in actor_stats.items()},
                                **{f"value/{k}": torch.as_tensor(v).detach() for k, v in critic_stats.items()}})
        return {key: torch.stack([h[key].float() for h in history]).mean() for key in history[0]}

    def step(self, batch: dict) -> tuple:
        """One PPO iteration; returns ``(metrics averaged over processes, experience)``."""
        experience, stats = self.make_experience(batch)
        stats.update(self.train_on_experience(experience))
        stats["lr/actor"] = torch.tensor(self.engines.actor.get_lr()[0])
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
    def evaluate(self, loader, sampling: SamplingConfig) -> Dict[str, float]:
        """Mean ± std of the score of responses sampled for held-out prompts (paper Table 2's RM score)."""
        scores, lengths = [], []
        for batch in loader:
            prompts = batch["input_ids"].to(self.device)
            prompt_mask = batch["attention_mask"].to(self.device)
            seq, attention_mask, action_mask = self.sample(prompts, prompt_mask, sampling)
            responses = decode_responses(self.tokenizer, seq, action_mask)
            batch_scores, _ = self.reward_source(seq, attention_mask, responses, batch.get("index"))
            scores.append(batch_scores.float().to(self.device))
            lengths.append(action_mask.sum(dim=1).float())
        scores = torch.cat(scores)
        mean = all_reduce_mean(scores.mean())
        std = all_reduce_mean(((scores - mean) ** 2).mean()).sqrt()
        return {"score": mean.item(), "score_std": std.item(),
                "response_length": all_reduce_mean(torch.cat(lengths).mean()).item()}
