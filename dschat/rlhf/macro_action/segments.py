"""Segment ids and the macro-level pooling / broadcast built on them (paper §3.2, Appendix D.1, Appendix E).

Every tensor here is ``[B, T]`` over log-prob positions (position ``t`` scores token ``seq[:, t + 1]``).
``action_mask`` is 1 exactly on response tokens, whatever the padding side. A *segment-id* tensor holds, for
each response token, the 0-based index of its macro action within its row (contiguous and in order) and -1
where ``action_mask`` is 0. Macro tensors are ``[B, M]`` with ``M`` the largest number of macros of a row in
the batch (at least 1, so a batch without any response token still has a well-formed, fully masked macro
axis); ``macro_mask`` marks the macros a row really has.

Everything is vectorised with cumsum / scatter_add / gather: no Python loop over tokens, macros or samples.
Pooled values are computed in at least float32 (bf16/fp16 critic values are promoted).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence, Tuple, Union

import torch

from .choices import REWARD_AGGS, SIGMAS

Lengths = Union[torch.Tensor, Sequence[Sequence[int]]]


def as_action_mask(action_mask: torch.Tensor) -> torch.Tensor:
    """``action_mask`` (bool or 0/1 integers) as a bool ``[B, T]`` tensor."""
    if not isinstance(action_mask, torch.Tensor) or action_mask.dim() != 2:
        shape = tuple(action_mask.shape) if isinstance(action_mask, torch.Tensor) else type(action_mask).__name__
        raise ValueError(f"action_mask must be a 2-D [B, T] tensor, got {shape}")
    return action_mask.bool()


def check_same_shape(name: str, tensor: torch.Tensor, reference: torch.Tensor, reference_name: str) -> None:
    """Raise ValueError unless ``tensor`` has the shape of ``reference``."""
    if not isinstance(tensor, torch.Tensor) or tensor.shape != reference.shape:
        shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must have the shape of {reference_name} {tuple(reference.shape)}, got {shape}")


def work_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The floating dtype pooled quantities are computed in: the tensor's own, but never below float32."""
    return torch.promote_types(tensor.dtype, torch.float32)


def response_ranks(action_mask: torch.Tensor) -> torch.Tensor:
    """0-based rank of each response token among its row's response tokens, -1 off the response."""
    on = as_action_mask(action_mask)
    ranks = on.long().cumsum(dim=1) - 1
    return torch.where(on, ranks, torch.full_like(ranks, -1))


def _length_table(lengths: Lengths, batch_size: int, fill: int, device: torch.device) -> torch.Tensor:
    """``lengths`` as a ``[B, L]`` long tensor; ragged rows are padded with ``fill`` (an unreachable length)."""
    if isinstance(lengths, torch.Tensor):
        table = lengths.long().to(device)
        if table.dim() == 1:
            table = table.unsqueeze(0).expand(batch_size, -1)
    else:
        if len(lengths) != batch_size:
            raise ValueError(f"lengths must hold one sequence per row ({batch_size}), got {len(lengths)}")
        width = max((len(row) for row in lengths), default=0)
        table = torch.full((batch_size, width), fill, dtype=torch.long)
        for row_index, row in enumerate(lengths):
            table[row_index, : len(row)] = torch.as_tensor(list(row), dtype=torch.long)
        table = table.to(device)
    if table.dim() != 2 or table.shape[0] != batch_size:
        raise ValueError(f"lengths must be [L] or [B={batch_size}, L], got shape {tuple(table.shape)}")
    if table.numel() and int(table.min()) < 1:
        raise ValueError("lengths must be macro lengths >= 1")
    return table.contiguous()


def segments_from_lengths(action_mask: torch.Tensor, lengths: Lengths) -> torch.Tensor:
    """Segment ids from macro lengths (paper §B.4: ``t_{τ+1} = t_τ + |ω_τ|``).

    ``lengths`` is ``[L]`` (shared by every row), ``[B, L]``, or one sequence of lengths per row (ragged).
    Row ``b``'s macro ``i`` spans its next ``lengths[b][i]`` response tokens; the response ends wherever it
    ends (the last macro used may be cut short); response tokens past the sum of the lengths form one final
    macro (the "large number" of §B.4). Vectorised with ``searchsorted`` on the cumulative lengths.
    """
    on = as_action_mask(action_mask)
    table = _length_table(lengths, on.shape[0], fill=on.shape[1] + 1, device=on.device)
    macro_ends = table.cumsum(dim=1)
    ranks = response_ranks(on)
    segment_ids = torch.searchsorted(macro_ends, ranks.clamp(min=0), right=True)
    return torch.where(on, segment_ids, torch.full_like(segment_ids, -1))


def macros_per_row(segment_ids: torch.Tensor) -> torch.Tensor:
    """``[B]`` number of macros of each row (0 for a row without response tokens)."""
    if segment_ids.dim() != 2:
        raise ValueError(f"segment_ids must be a 2-D [B, T] tensor, got {tuple(segment_ids.shape)}")
    if segment_ids.shape[1] == 0:
        return segment_ids.new_zeros(segment_ids.shape[0])
    return segment_ids.max(dim=1).values + 1


def validate_segment_ids(segment_ids: torch.Tensor, action_mask: torch.Tensor) -> None:
    """Raise ValueError unless ``segment_ids`` is a valid segmentation of ``action_mask``: integer, -1 exactly
    off the response, and along each row's response tokens starting at 0 and growing by 0 or 1 per token."""
    on = as_action_mask(action_mask)
    check_same_shape("segment_ids", segment_ids, on, "action_mask")
    if segment_ids.dtype.is_floating_point or segment_ids.dtype == torch.bool:
        raise ValueError(f"segment_ids must be an integer tensor, got {segment_ids.dtype}")
    if bool(((segment_ids != -1) & ~on).any()):
        raise ValueError("segment_ids must be -1 exactly where action_mask is 0")
    on_response = torch.where(on, segment_ids.long(), torch.full_like(segment_ids, -1, dtype=torch.long))
    running_max = on_response.cummax(dim=1).values
    previous_max = torch.nn.functional.pad(running_max[:, :-1], (1, 0), value=-1)
    step = on_response - previous_max
    if bool((on & ((step < 0) | (step > 1))).any()):
        raise ValueError("segment_ids must number each row's macros 0, 1, 2, ... contiguously along the response")


class _Layout(NamedTuple):
    """Where each token goes when pooling: on-response mask, scatter index (-1 mapped to 0), M, macro mask."""

    on: torch.Tensor
    index: torch.Tensor
    num_macros: int
    macro_mask: torch.Tensor


def _layout(segment_ids: torch.Tensor) -> _Layout:
    """The pooling layout of ``segment_ids``; M is the largest number of macros of a row, at least 1 (one
    host sync, for the size of the macro axis)."""
    if segment_ids.dim() != 2:
        raise ValueError(f"segment_ids must be a 2-D [B, T] tensor, got {tuple(segment_ids.shape)}")
    counts = macros_per_row(segment_ids)
    num_macros = max(int(counts.max()), 1) if counts.numel() else 1
    macro_mask = torch.arange(num_macros, device=segment_ids.device).unsqueeze(0) < counts.unsqueeze(1)
    return _Layout(segment_ids >= 0, segment_ids.clamp(min=0).long(), num_macros, macro_mask)


def _scatter_sum(tokens: torch.Tensor, layout: _Layout) -> torch.Tensor:
    """``[B, M]`` per-macro sums of ``tokens`` in :func:`work_dtype`, ignoring tokens off the response."""
    dtype = work_dtype(tokens)
    contributions = torch.where(layout.on, tokens.to(dtype), torch.zeros((), dtype=dtype, device=tokens.device))
    sums = torch.zeros(tokens.shape[0], layout.num_macros, dtype=dtype, device=tokens.device)
    return sums.scatter_add(1, layout.index, contributions)


def _lengths(layout: _Layout, dtype: torch.dtype) -> torch.Tensor:
    """``[B, M]`` macro lengths |ω_τ| (0 for masked macros)."""
    return _scatter_sum(layout.on.to(dtype), layout)


def segment_sum(tokens: torch.Tensor, segment_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-macro sum of ``tokens`` (``scatter_add``; differentiable): ``([B, M], macro_mask [B, M])``.
    Values off the response are ignored, even NaN or inf."""
    check_same_shape("tokens", tokens, segment_ids, "segment_ids")
    layout = _layout(segment_ids)
    return _scatter_sum(tokens, layout), layout.macro_mask


def segment_mean(tokens: torch.Tensor, segment_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-macro mean of ``tokens``: ``([B, M], macro_mask [B, M])``, 0 on masked macros."""
    check_same_shape("tokens", tokens, segment_ids, "segment_ids")
    layout = _layout(segment_ids)
    sums = _scatter_sum(tokens, layout)
    return sums / _lengths(layout, sums.dtype).clamp(min=1), layout.macro_mask


def macro_lengths(segment_ids: torch.Tensor) -> torch.Tensor:
    """``[B, M]`` number of tokens of each macro |ω_τ| (0 for a masked macro), as float32."""
    return _lengths(_layout(segment_ids), torch.float32)


def _sigma_weights(layout: _Layout, sigma: str, dtype: torch.dtype) -> torch.Tensor:
    if sigma not in SIGMAS:
        raise ValueError(f"sigma must be one of {SIGMAS}, got {sigma!r}")
    on, index = layout.on, layout.index
    lengths = _lengths(layout, dtype)
    starts = lengths.cumsum(dim=1) - lengths
    token_length = lengths.gather(1, index)
    offset = response_ranks(on).to(dtype) - starts.gather(1, index)
    if sigma == "equal":
        raw = torch.ones_like(offset)
    elif sigma == "unit":
        raw = (offset == token_length - 1).to(dtype)
    else:
        raw = 1.0 / (token_length - offset).clamp(min=1)
    raw = torch.where(on, raw, torch.zeros_like(raw))
    normaliser = _scatter_sum(raw, layout).gather(1, index)
    return torch.where(on, raw / torch.where(on, normaliser, torch.ones_like(normaliser)), torch.zeros_like(raw))


def sigma_weights(segment_ids: torch.Tensor, sigma: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Token weights σ of the macro value (paper Appendix D.1), ``[B, T]``, summing to 1 over each macro and 0
    off the response. With ``i`` the token's offset in its macro ω:

    - ``equal``: 1/|ω| (the paper's default);
    - ``unit``: 1 on the macro's last token, 0 elsewhere;
    - ``position``: 1/((|ω| - i)·H) with H = Σ_{i=0}^{|ω|-1} 1/(|ω| - i), so the last token weighs most.
    """
    return _sigma_weights(_layout(segment_ids), sigma, dtype)


def macro_values(values: torch.Tensor, segment_ids: torch.Tensor, sigma: str = "equal"
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Macro value V(s_τ, ω_τ) = Σ_i σ_{t_τ+i} V(s_{t_τ+i}) (paper Appendix D.1, Algorithm 1):
    ``(macro_values [B, M], macro_mask [B, M])``; σ from :func:`sigma_weights`."""
    check_same_shape("values", values, segment_ids, "segment_ids")
    layout = _layout(segment_ids)
    weights = _sigma_weights(layout, sigma, work_dtype(values))
    weighted = torch.where(layout.on, values.to(weights.dtype), torch.zeros_like(weights)) * weights
    return _scatter_sum(weighted, layout), layout.macro_mask


def macro_rewards(rewards: torch.Tensor, segment_ids: torch.Tensor, agg: str = "sum"
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Macro reward R_τ (paper §3.2.2): ``sum`` = Σ_i ρ^i r_{t_τ+i} with ρ = 1 (the paper's definition), or
    ``mean`` (what the released code computes). ``(macro_rewards [B, M], macro_mask [B, M])``."""
    if agg not in REWARD_AGGS:
        raise ValueError(f"reward_agg must be one of {REWARD_AGGS}, got {agg!r}")
    check_same_shape("rewards", rewards, segment_ids, "segment_ids")
    return segment_sum(rewards, segment_ids) if agg == "sum" else segment_mean(rewards, segment_ids)


def to_tokens(macro_tensor: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """Broadcast a ``[B, M]`` macro tensor back to ``[B, T]`` tokens (each token gets its macro's entry, as in
    Appendix E); 0 where ``segment_ids`` is -1."""
    if macro_tensor.dim() != 2 or macro_tensor.shape[0] != segment_ids.shape[0]:
        raise ValueError(f"macro_tensor must be [B={segment_ids.shape[0]}, M], got {tuple(macro_tensor.shape)}")
    largest = int(segment_ids.max()) if segment_ids.numel() else -1
    if largest < 0:
        return macro_tensor.new_zeros(segment_ids.shape)
    if largest >= macro_tensor.shape[1]:
        raise ValueError(f"macro_tensor has {macro_tensor.shape[1]} macros, segment_ids needs {largest + 1}")
    on = segment_ids >= 0
    gathered = macro_tensor.gather(1, segment_ids.clamp(min=0).long())
    return torch.where(on, gathered, torch.zeros_like(gathered))
