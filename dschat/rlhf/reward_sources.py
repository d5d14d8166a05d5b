"""Where the scalar score r(x, y) comes from: a reward model, or (for code tasks) program execution."""
from __future__ import annotations

from typing import Protocol

import torch

from dschat.utils.model import sequence_scores


class RewardSource(Protocol):
    def __call__(self, seq: torch.Tensor, attention_mask: torch.Tensor, responses: list, meta: list) -> tuple:
        """Return ``(scores [B] float tensor, counters dict)`` for a rollout batch."""


class ModelReward:
    """r(x, y) = the reward model's score at the last real token of ``[prompt | response]``."""

    def __init__(self, engine):
        self.engine = engine

    @torch.no_grad()
    def __call__(self, seq, attention_mask, responses, meta):
        return sequence_scores(self.engine.module, seq, attention_mask), {}
