"""What every rollout engine returns and how it learns that the actor changed."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch


@dataclass
class Rollout:
    """Sampled responses in the trainer's layout (:mod:`dschat.rlhf.experience`): ``seq = [left-padded prompt |
    response]`` ``[B, P + max_new_tokens]``, responses padded after their eos with the pad id; ``entropy`` and
    ``engine_logprobs`` ``[B, T-1]`` aligned with log-prob positions (0 off the response), or None when the
    engine does not provide them; ``stats``: what the engine measured of this rollout (an asynchronous producer's
    staleness and waits), logged with the iteration's metrics. A multi-turn episode (:mod:`.episodes`) carries its
    own ``attention_mask`` ``[B, T]`` and ``action_mask`` ``[B, T-1]`` (observation tokens attended, not actions)
    and its environment's ``scores`` ``[B]``; None for single responses (masks from the eos, scores from the
    reward source); ``token_versions`` ``[B, T - P]``: the policy version that sampled each generated
    token (an asynchronous producer's; :mod:`.partial`)."""

    seq: torch.Tensor
    entropy: Optional[torch.Tensor] = None
    engine_logprobs: Optional[torch.Tensor] = None
    stats: Dict[str, torch.Tensor] = field(default_factory=dict)
    attention_mask: Optional[torch.Tensor] = None
    action_mask: Optional[torch.Tensor] = None
    scores: Optional[torch.Tensor] = None
    token_versions: Optional[torch.Tensor] = None


class PlainModel:
    """What a rollout engine reads of a DeepSpeed engine, for a model outside DeepSpeed (tests, benchmarks and
    evaluation tools that sample from a saved policy)."""

    def __init__(self, module: torch.nn.Module):
        self.module = module

    @staticmethod
    def zero_optimization_stage() -> int:
        return 0


class RolloutEngine:
    """Samples rollouts from the current actor. Subclasses implement :meth:`sample` and, when they hold their own
    copy of the weights, :meth:`load_weights`; :meth:`generate` loads them first whenever :meth:`mark_stale` was
    called since the last load (after every update that changed the actor)."""

    def __init__(self, actor):
        self.actor = actor
        self.stale = True
        self.last_sync_seconds = 0.0

    def mark_stale(self) -> None:
        """The actor changed: load its weights before the next rollout."""
        self.stale = True

    def generate(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling, record_entropy: bool = False
                 ) -> Rollout:
        """Responses to left-padded ``prompts`` under ``sampling`` (a :class:`~dschat.rlhf.experience.SamplingConfig`),
        with the current actor's weights."""
        self.last_sync_seconds = 0.0
        if self.stale:
            start = time.perf_counter()
            self.load_weights()
            self.last_sync_seconds = time.perf_counter() - start
            self.stale = False
        return self.sample(prompts, prompt_mask, sampling, record_entropy)

    def next_rollout(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling, record_entropy: bool = False
                     ) -> Rollout:
        """The rollout a PPO iteration trains on, for that iteration's prompts: sampled now with the current actor
        (:meth:`generate`), or by an asynchronous producer ahead of time (:mod:`.producer`)."""
        return self.generate(prompts, prompt_mask, sampling, record_entropy)

    def close(self) -> None:
        """Release what the engine holds beyond the run (a producer process); nothing by default."""

    def load_weights(self) -> None:
        """Copy the actor's weights into the engine (nothing to do for an engine that generates with the actor)."""

    def sample(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling, record_entropy: bool) -> Rollout:
        raise NotImplementedError
