"""Clipped PPO losses with macro actions (paper §3.2.2 MA-PPO objective, Appendix E)."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from .segments import as_action_mask, check_same_shape, segment_mean, segment_sum, validate_segment_ids

RATIO_MODES = ("token", "macro")
MAX_LOG_RATIO = 20.0
"""Upper bound on a unit's log-ratio before ``exp`` (r ≤ e^20 ≈ 4.9e8). A macro's log-ratio is a sum over its
tokens, so a long macro can exceed ~88 and ``exp`` overflows float32 (inf loss, NaN gradient). Above the bound
the clipped objective is unchanged where it is flat: with Â > 0 the clipped term (1+ε)·Â is active for every
r > 1+ε (value exact, gradient 0 either way); with Â < 0 the loss is capped at −Â·e^20 with gradient 0 instead
of growing without bound. Below the bound (every ratio that is not absurd) value and gradient are exact."""


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(x·mask) / sum(mask) (DeepSpeed-Chat's reduction); 0 when the mask is empty; ignores x off the mask."""
    on = mask.bool()
    return torch.where(on, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum() / on.sum().clamp(min=1)


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                action_mask: torch.Tensor, clip_eps: float, segment_ids: Optional[torch.Tensor] = None,
                ratio: str = "token", weights: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Clipped surrogate loss −min(r·Â, clip(r, 1−ε, 1+ε)·Â) and its statistics.

    ``ratio="token"`` (the released code, DeepSpeed-Chat): r_t = π(a_t|s_t)/π_old(a_t|s_t) per response token
    with that token's (macro-broadcast) advantage; the loss is the mean over response tokens of the batch.

    ``ratio="macro"`` (paper §3.2.2): r_τ = π(ω_τ|s_τ)/π_old(ω_τ|s_τ) = exp(Σ_{t∈ω_τ} log r_t), clipped once
    per macro, with the macro's advantage Â_τ (the mean of ``advantages`` over the macro; broadcast
    advantages are constant there); the loss is the mean over all macros of the batch (E_τ of the paper).
    Long macros make r_τ a product of many token ratios: it leaves [1−ε, 1+ε] quickly and, for negative
    advantages, is not bounded above; its log-ratio is capped at :data:`MAX_LOG_RATIO` so that ``exp`` stays
    finite (both modes). Needs ``segment_ids``.

    ``weights`` (``[B, T]``, detached; default 1): each unit's clipped term is multiplied by its weight before
    the mean, the rollout correction's truncated importance weights (:mod:`.correction`); a macro unit takes the
    mean of its tokens' weights (its own weight when they carry it broadcast).

    Stats (detached): ``clipfrac``, the fraction of ratio units (tokens or macros) whose clipped term is the
    active one; ``approx_kl``, the mean over response tokens of (r_t − 1) − log r_t ≈ KL(π_old ‖ π) in both
    modes; ``ratio_mean``, the mean ratio over the units.
    """
    if ratio not in RATIO_MODES:
        raise ValueError(f"ratio must be one of {RATIO_MODES}, got {ratio!r}")
    if clip_eps <= 0:
        raise ValueError(f"clip_eps must be > 0, got {clip_eps!r}")
    on = as_action_mask(action_mask)
    check_same_shape("logprobs", logprobs, on, "action_mask")
    check_same_shape("old_logprobs", old_logprobs, on, "action_mask")
    check_same_shape("advantages", advantages, on, "action_mask")
    if weights is not None:
        check_same_shape("weights", weights, on, "action_mask")
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    token_log_ratio = torch.where(on, logprobs - old_logprobs, zero)

    if ratio == "token":
        unit_log_ratio, unit_advantages, unit_mask = token_log_ratio, advantages, on
        unit_weights = weights
    else:
        if segment_ids is None:
            raise ValueError('segment_ids is required with ratio="macro"')
        validate_segment_ids(segment_ids, on)
        unit_log_ratio, unit_mask = segment_sum(token_log_ratio, segment_ids)
        unit_advantages = segment_mean(advantages, segment_ids)[0]
        unit_weights = None if weights is None else segment_mean(weights, segment_ids)[0]

    unit_ratio = torch.exp(unit_log_ratio.clamp(max=MAX_LOG_RATIO))
    unclipped = -unit_advantages * unit_ratio
    clipped = -unit_advantages * torch.clamp(unit_ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    objective = torch.max(unclipped, clipped)
    loss = masked_mean(objective if unit_weights is None else objective * unit_weights.detach(), unit_mask)
    with torch.no_grad():
        token_ratio = torch.exp(token_log_ratio)
        stats = {
            "clipfrac": masked_mean((clipped > unclipped).to(unclipped.dtype), unit_mask),
            "approx_kl": masked_mean((token_ratio - 1.0) - token_log_ratio, on),
            "ratio_mean": masked_mean(unit_ratio.detach(), unit_mask),
        }
    return loss, stats


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, action_mask: torch.Tensor,
               value_clip: Optional[float]) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """DeepSpeed-Chat's clipped critic loss 0.5·max((V − Q̂)², (clip(V, V_old ± c) − Q̂)²), mean over response
    tokens; each token's value regresses on its macro's return Q̂_τ (broadcast, as in Appendix E).
    ``value_clip=None`` disables clipping. Stats (detached): ``clipfrac`` (clipped term active)."""
    on = as_action_mask(action_mask)
    check_same_shape("values", values, on, "action_mask")
    check_same_shape("old_values", old_values, on, "action_mask")
    check_same_shape("returns", returns, on, "action_mask")
    if value_clip is not None and value_clip <= 0:
        raise ValueError(f"value_clip must be > 0 or None, got {value_clip!r}")
    unclipped = (values - returns) ** 2
    if value_clip is None:
        clipped = unclipped
    else:
        clipped = (torch.clamp(values, old_values - value_clip, old_values + value_clip) - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(unclipped, clipped), on)
    with torch.no_grad():
        stats = {"clipfrac": masked_mean((clipped > unclipped).to(unclipped.dtype), on)}
    return loss, stats
