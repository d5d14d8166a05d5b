"""Entropy-based termination: a macro ends after a *forking* token (beyond the paper).

The paper's rules cut where a fixed length, a parse tree or the reference model's perplexity says; none looks
at where the policy itself is undecided. Token-level RL work on reasoning (Wang et al., 2025, "Beyond the 80/20
rule: high-entropy minority tokens drive effective RL for LLM reasoning") finds that a minority of
high-entropy tokens — forks, where the policy chooses between continuations — carry most of the learning
signal, and the low-entropy runs between them are near-deterministic consequences of the fork before them.
This rule makes each such run one macro action: a macro ends after every token whose policy entropy is high,
so the decision at a fork and the text it commits to share one advantage (§3.2.2), and the credit-assignment
distance (§3.2.3) counts forks, not tokens.

High means either a fixed threshold in nats (``threshold``) or, per response, the ⌈q·L⌉ highest-entropy
tokens of its L response tokens (``quantile`` q; ties at the cut count as forks): q = 0.2 gives macros of ~5
tokens, the size of the paper's main n = 5, with the cuts placed by the policy instead of the position.
The entropy is the sampling distribution's, softmax(logits / T) before top-k / top-p truncation, recorded
while the rollout is generated (``dschat.rlhf.experience.EntropyRecorder``: no extra forward pass). The rule
is deterministic given the rollout, so a resumed run cuts exactly as an uninterrupted one.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..segments import as_action_mask, check_same_shape, work_dtype
from .base import Segmentation, SegmentationBatch, TerminationRule
from .options import TerminationOptions
from .registry import register_termination


def fork_thresholds(entropy: torch.Tensor, action_mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """``[B, 1]`` per-response cut: the ⌈quantile·L⌉-th highest entropy among each row's L response tokens
    (+inf for a row without response tokens or for ``quantile`` 0, so that no token is a fork)."""
    on = as_action_mask(action_mask)
    lengths = on.sum(dim=1)
    ranked = torch.where(on, entropy.to(work_dtype(entropy)), torch.full_like(entropy, -math.inf,
                                                                              dtype=work_dtype(entropy)))
    ranked = ranked.sort(dim=1, descending=True).values
    count = torch.ceil(lengths.to(ranked.dtype) * quantile).long()
    cut = ranked.gather(1, (count - 1).clamp(min=0).unsqueeze(1))
    return torch.where((count > 0).unsqueeze(1), cut, torch.full_like(cut, math.inf))


def entropy_segments(entropy: torch.Tensor, action_mask: torch.Tensor, threshold: Optional[float] = None,
                     quantile: float = 0.2) -> torch.Tensor:
    """Segment ids ``[B, T]`` cutting after every fork: a response token whose policy ``entropy`` ``[B, T]`` is
    at least ``threshold`` (nats) or, with ``threshold`` None, among its response's top-``quantile`` tokens.

    Response tokens are contiguous in a row (any padding side), so a token's macro index is the number of forks
    before it in its row: an exclusive cumulative sum, vectorised over the batch.
    """
    on = as_action_mask(action_mask)
    check_same_shape("entropy", entropy, on, "action_mask")
    values = entropy.to(work_dtype(entropy))
    cut = values.new_tensor(threshold) if threshold is not None else fork_thresholds(values, on, quantile)
    forks = (on & (values >= cut)).long()
    ids = forks.cumsum(dim=1) - forks
    return torch.where(on, ids, torch.full_like(ids, -1))


@register_termination("entropy")
def build_entropy(options: TerminationOptions) -> TerminationRule:
    """Forking-token rule; reads ``batch.entropy`` (the policy's entropy at each sampled token)."""

    def rule(batch: SegmentationBatch) -> Segmentation:
        if batch.entropy is None:
            raise ValueError("entropy termination needs SegmentationBatch.entropy (the policy's entropy per token)")
        segment_ids = entropy_segments(batch.entropy, batch.action_mask, options.entropy_threshold,
                                       options.entropy_quantile)
        return Segmentation(segment_ids, torch.zeros(segment_ids.shape[0], dtype=torch.bool,
                                                     device=segment_ids.device))

    rule.needs_entropy = True  # a rollout engine that records no entropy gets it from an actor forward
    return rule
