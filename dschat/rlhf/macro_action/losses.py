"""Clipped PPO losses with macro actions (paper §3.2.2 MA-PPO objective, Appendix E)."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from .choices import DEFAULT_LOSS_AGG, RATIOS
from .objective import MACRO_RATIOS, aggregate, clipped_objective, masked_mean, unit_log_ratio, unit_segments
from .segments import as_action_mask, check_same_shape, segment_mean, validate_segment_ids

RATIO_MODES = RATIOS
MAX_LOG_RATIO = 20.0
"""Upper bound on a unit's log-ratio before ``exp`` (r ≤ e^20 ≈ 4.9e8). A macro's log-ratio is a sum over its
tokens, so a long macro can exceed ~88 and ``exp`` overflows float32 (inf loss, NaN gradient). Above the bound
the clipped objective is unchanged where it is flat: with Â > 0 the clipped term (1+ε)·Â is active for every
r > 1+ε (value exact, gradient 0 either way); with Â < 0 the loss is capped at −Â·e^20 with gradient 0 instead
of growing without bound. Below the bound (every ratio that is not absurd) value and gradient are exact."""


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                action_mask: torch.Tensor, clip_eps: float, segment_ids: Optional[torch.Tensor] = None,
                ratio: str = "token", weights: Optional[torch.Tensor] = None, clip_eps_high: Optional[float] = None,
                loss_agg: Optional[str] = None, norm_length: Optional[int] = None
                ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Clipped surrogate loss −min(r·Â, clip(r, 1−ε, 1+ε_high)·Â) and its statistics.

    ``ratio="token"`` (the released code, DeepSpeed-Chat): r_t = π(a_t|s_t)/π_old(a_t|s_t) per response token
    with that token's (macro-broadcast) advantage; the loss is the mean over response tokens of the batch.

    ``ratio="macro"`` (paper §3.2.2): r_τ = π(ω_τ|s_τ)/π_old(ω_τ|s_τ) = exp(Σ_{t∈ω_τ} log r_t), clipped once
    per macro, with the macro's advantage Â_τ (the mean of ``advantages`` over the macro; broadcast
    advantages are constant there); the loss is the mean over all macros of the batch (E_τ of the paper).
    Long macros make r_τ a product of many token ratios: it leaves [1−ε, 1+ε] quickly and, for negative
    advantages, is not bounded above; its log-ratio is capped at :data:`MAX_LOG_RATIO` so that ``exp`` stays
    finite (both modes). Needs ``segment_ids``.

    ``ratio="macro_geo"`` / ``"sequence_geo"``: the geometric mean of the tokens' ratios over each macro / over the
    whole response (GSPO, Zheng et al. 2025 eq. 7), units and formulas in :mod:`.objective`. ``clip_eps_high``
    (default ``clip_eps``): the upper clip bound 1 + ε_high (DAPO's clip-higher). ``loss_agg`` (default: the mean
    over the ratio's units, :data:`~.choices.DEFAULT_LOSS_AGG`): how the units' terms become the loss
    (:func:`~.objective.aggregate`; ``norm_length`` is L of ``seq_mean_token_sum_norm``).

    ``weights`` (``[B, T]``, detached; default 1): each unit's clipped term is multiplied by its weight before
    the mean, the rollout correction's truncated importance weights (:mod:`.correction`); a macro unit takes the
    mean of its tokens' weights (its own weight when they carry it broadcast).

    Stats (detached): ``clipfrac``, the fraction of ratio units (tokens or macros) whose clipped term is the
    active one; ``approx_kl``, the mean over response tokens of (r_t − 1) − log r_t ≈ KL(π_old ‖ π) in both
    modes; ``ratio_mean``, the mean ratio over the units.
    """
    if ratio not in RATIO_MODES:
        raise ValueError(f"ratio must be one of {RATIO_MODES}, got {ratio!r}")
    if clip_eps <= 0 or (clip_eps_high is not None and clip_eps_high <= 0):
        raise ValueError(f"clip_eps and clip_eps_high must be > 0, got {clip_eps!r}, {clip_eps_high!r}")
    on = as_action_mask(action_mask)
    check_same_shape("logprobs", logprobs, on, "action_mask")
    check_same_shape("old_logprobs", old_logprobs, on, "action_mask")
    check_same_shape("advantages", advantages, on, "action_mask")
    if weights is not None:
        check_same_shape("weights", weights, on, "action_mask")
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    token_log_ratio = torch.where(on, logprobs - old_logprobs, zero)

    units = unit_segments(ratio, segment_ids, on)
    if units is None:
        unit_log, unit_advantages, unit_mask = token_log_ratio, advantages, on
        unit_weights = weights
    else:
        if ratio in MACRO_RATIOS:
            validate_segment_ids(units, on)
        unit_log, unit_mask = unit_log_ratio(token_log_ratio, units, geometric=ratio != "macro")
        unit_advantages = segment_mean(advantages, units)[0]
        unit_weights = None if weights is None else segment_mean(weights, units)[0]

    unit_ratio = torch.exp(unit_log.clamp(max=MAX_LOG_RATIO))
    objective, clipped_active = clipped_objective(unit_ratio, unit_advantages, clip_eps,
                                                  clip_eps if clip_eps_high is None else clip_eps_high)
    terms = objective if unit_weights is None else objective * unit_weights.detach()
    loss = aggregate(terms, unit_mask, on, loss_agg or DEFAULT_LOSS_AGG[ratio], units=units, segment_ids=segment_ids,
                     units_are_macros=ratio in MACRO_RATIOS, norm_length=norm_length)
    with torch.no_grad():
        token_ratio = torch.exp(token_log_ratio)
        stats = {
            "clipfrac": masked_mean(clipped_active.to(objective.dtype), unit_mask),
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
