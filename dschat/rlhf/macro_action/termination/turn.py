"""Turn termination (``--termination turn``): each of the policy's turns in a multi-turn episode is one macro
action, so MA-PPO's macro GAE is turn-level credit assignment (utterance-level, as ArCHer's critic; Zhou et al.,
2024), with ``--turn_ngram n`` fixed n-grams inside each turn that never cross a turn boundary.

A turn is a maximal run of response tokens: in an episode (:mod:`dschat.rlhf.rollout.episodes`) the environment's
observation tokens lie between turns with ``action_mask`` 0. A single response is one turn, so on one-turn
episodes ``turn`` is ``fixed`` with ``--ngram inf`` (n → ∞, §3.2.3).
"""
from __future__ import annotations

from typing import Optional

import torch

from ..segments import as_action_mask
from .base import Segmentation, SegmentationBatch, TerminationRule
from .ngram import check_ngram
from .options import TerminationOptions
from .registry import register_termination


def turn_starts(action_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` bool: the first token of each turn (a response token whose previous position is not one)."""
    on = as_action_mask(action_mask)
    before = torch.nn.functional.pad(on[:, :-1], (1, 0), value=False)
    return on & ~before


def turn_segments(action_mask: torch.Tensor, n: Optional[int] = None) -> torch.Tensor:
    """Segment ids with one macro per turn (``n = None``), or n-grams restarting at each turn start: the token of
    rank ``r`` within its turn starts a macro when ``r % n == 0``. -1 off the response."""
    check_ngram(n)
    on = as_action_mask(action_mask)
    starts = turn_starts(on)
    if n is None:
        opens = starts
    else:
        seen = on.long().cumsum(dim=1)
        before_turn = torch.where(starts, seen - 1, torch.zeros_like(seen)).cummax(dim=1).values
        opens = on & ((seen - 1 - before_turn) % n == 0)
    segment_ids = opens.long().cumsum(dim=1) - 1
    return torch.where(on, segment_ids, torch.full_like(segment_ids, -1))


@register_termination("turn")
def build_turn(options: TerminationOptions) -> TerminationRule:
    """One macro per turn, or ``options.turn_ngram``-grams inside each turn."""
    check_ngram(options.turn_ngram)

    def rule(batch: SegmentationBatch) -> Segmentation:
        segment_ids = turn_segments(batch.action_mask, options.turn_ngram)
        return Segmentation(segment_ids, torch.zeros(segment_ids.shape[0], dtype=torch.bool, device=segment_ids.device))

    return rule
