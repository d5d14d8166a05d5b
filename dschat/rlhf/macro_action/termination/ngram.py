"""Fixed n-gram termination (paper §3.2.1 (a), Appendix B.4 rule 1): every macro has ``n`` tokens."""
from __future__ import annotations

from typing import Optional

import torch

from ..segments import as_action_mask, response_ranks
from .base import Segmentation, SegmentationBatch, TerminationRule
from .options import TerminationOptions
from .registry import register_termination


def check_ngram(n: Optional[int]) -> None:
    """Raise ValueError unless ``n`` is a positive integer or None (one macro per response, n → ∞)."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"ngram must be an integer >= 1 or None (whole response), got {n!r}")


def ngram_segments(action_mask: torch.Tensor, n: Optional[int]) -> torch.Tensor:
    """Segment ids of fixed n-grams: the token of response rank ``r`` (0-based) is in macro ``r // n``.

    ``n = 1`` is token-level PPO; ``n = None`` makes the whole response one macro (§3.2.3, n → ∞). The last
    macro of a row holds the remaining ``len % n`` tokens when ``n`` does not divide the response length; no
    empty macro is ever created (the released code appended a duplicate final boundary).
    """
    check_ngram(n)
    on = as_action_mask(action_mask)
    ranks = response_ranks(on)
    segment_ids = torch.zeros_like(ranks) if n is None else ranks.clamp(min=0) // n
    return torch.where(on, segment_ids, torch.full_like(segment_ids, -1))


@register_termination("fixed", aliases=("ngram",))
def build_fixed_ngram(options: TerminationOptions) -> TerminationRule:
    """Fixed n-gram rule with ``n = options.ngram`` (None: the whole response is one macro)."""
    check_ngram(options.ngram)

    def rule(batch: SegmentationBatch) -> Segmentation:
        segment_ids = ngram_segments(batch.action_mask, options.ngram)
        return Segmentation(segment_ids, torch.zeros(segment_ids.shape[0], dtype=torch.bool, device=segment_ids.device))

    return rule
