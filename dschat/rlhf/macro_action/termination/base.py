"""The contract every termination rule ζ (paper §3.2.1, Appendix B.4) fulfils.

A rule reads a batch of sampled responses and returns *segment ids*: for each response token, the 0-based
index of its macro action within its row (macros are contiguous and in order), and -1 where ``action_mask``
is 0. Tensors are ``[B, T]`` over log-prob positions: position ``t`` scores token ``seq[:, t + 1]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch


@dataclass
class SegmentationBatch:
    """What a termination rule may look at.

    action_mask: ``[B, T]`` bool/0-1, 1 exactly on response tokens (any padding side).
    ref_logprobs: ``[B, T]`` reference-model log-probabilities of the sampled tokens (PPL rule).
    response_token_ids: ``[B, T]`` the sampled token id at each log-prob position (``seq[:, 1:]``),
        needed by rules that decode text (parsing).
    tokenizer: the policy tokenizer, for rules that decode text.
    entropy: ``[B, T]`` entropy (nats) of the policy's sampling distribution from which the token at each
        log-prob position was drawn (entropy rule).
    """

    action_mask: torch.Tensor
    ref_logprobs: Optional[torch.Tensor] = None
    response_token_ids: Optional[torch.Tensor] = None
    tokenizer: Any = None
    entropy: Optional[torch.Tensor] = None


@dataclass
class Segmentation:
    """A rule's answer: ``segment_ids [B, T]`` (long, -1 off the response) and ``fallback [B]`` (bool), true
    for samples the rule could not segment and cut into token-level macros instead (paper §B.4)."""

    segment_ids: torch.Tensor
    fallback: torch.Tensor


TerminationRule = Callable[[SegmentationBatch], Segmentation]
"""A rule that draws random numbers (the randomized rule) also has ``state_dict()`` / ``load_state_dict()``:
step 3 puts that state into its checkpoints so a resumed run cuts exactly as an uninterrupted one. A rule that
reads ``entropy`` has ``needs_entropy = True``: step 3 then computes it when the rollout engine records none."""
