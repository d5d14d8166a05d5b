"""Perplexity-based termination (paper §3.2.1, Appendix B.4 rule 4).

A macro ω grows while appending the next token does not raise its perplexity. With nll_t = -log p_t from the
reference model (already computed for the KL penalty: no extra forward pass), ppl(ω) ∝ mean_{a∈ω} nll_a, and
the paper terminates ω before ``a`` iff ppl(ω ∪ a) > ppl(ω). Since
mean(ω ∪ a) > mean(ω)  ⇔  nll_a > mean(ω), token ``a`` joins the current macro iff nll_a <= mean(ω), so
the running mean NLL is non-increasing inside every macro (the paper's second condition).
"""
from __future__ import annotations

import torch

from ..segments import as_action_mask, check_same_shape, work_dtype
from .base import Segmentation, SegmentationBatch, TerminationRule
from .options import TerminationOptions
from .registry import register_termination


def ppl_segments(logprobs: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Segment ids of the running-perplexity rule from (reference-model) ``logprobs`` ``[B, T]``.

    The rule is sequential by nature: it loops over the time axis, vectorised over the batch. The response
    tokens of every row are first packed to the left (a stable sort of the mask), so the loop runs over the
    longest response only, not over prompt or padding positions.
    """
    on = as_action_mask(action_mask)
    check_same_shape("logprobs", logprobs, on, "action_mask")
    packed_positions = torch.sort((~on).to(torch.int8), dim=1, stable=True).indices
    longest = int(on.sum(dim=1).max()) if on.numel() else 0
    segment_ids = torch.full(on.shape, -1, dtype=torch.long, device=on.device)
    if longest == 0:
        return segment_ids
    packed_positions = packed_positions[:, :longest]
    packed_on = on.gather(1, packed_positions)
    packed_nll = -logprobs.to(work_dtype(logprobs)).gather(1, packed_positions)
    packed_nll = torch.where(packed_on, packed_nll, torch.zeros_like(packed_nll))

    # Packed columns past a row's response are processed like the rest and discarded at the end.
    columns = packed_nll.unbind(dim=1)
    nll_sum, count = columns[0], torch.ones_like(columns[0])
    starts = [torch.ones_like(packed_on[:, 0])]
    for nll in columns[1:]:
        start = nll > nll_sum / count
        nll_sum = torch.where(start, nll, nll_sum + nll)
        count = torch.where(start, 1.0, count + 1.0)
        starts.append(start)
    packed_ids = torch.stack(starts, dim=1).long().cumsum(dim=1) - 1
    packed_ids = torch.where(packed_on, packed_ids, torch.full_like(packed_ids, -1))
    return segment_ids.scatter(1, packed_positions, packed_ids)


@register_termination("ppl")
def build_ppl(options: TerminationOptions) -> TerminationRule:
    """Running-perplexity rule; reads ``batch.ref_logprobs``."""

    def rule(batch: SegmentationBatch) -> Segmentation:
        if batch.ref_logprobs is None:
            raise ValueError("ppl termination needs SegmentationBatch.ref_logprobs (reference-model log-probs)")
        segment_ids = ppl_segments(batch.ref_logprobs, batch.action_mask)
        return Segmentation(segment_ids, torch.zeros(segment_ids.shape[0], dtype=torch.bool, device=segment_ids.device))

    return rule
