"""Rollout correction: truncated importance weights for samples drawn by an inference engine (``--rollout_is``).

An inference engine (vLLM) samples the rollout from π_engine, which differs from the trainer's π_old by kernels,
precision and fused layers. The old log-probs are always the trainer's own; the gap is measured and, if asked,
corrected by weighting the clipped surrogate of :func:`~dschat.rlhf.macro_action.losses.policy_loss` per unit
with w = min(π_old(u)/π_engine(u), C) (truncated importance sampling; Ionides 2008, TRL's and veRL's
"rollout correction"). The unit u is

- ``token``: one response token, w_t = min(exp(log π_old(a_t) − log π_engine(a_t)), C);
- ``macro``: one macro action ω_τ (§3.2.1), the product over its tokens, w_τ = min(exp(Σ_{t∈ω_τ} (log π_old −
  log π_engine)), C) — the level at which MA-PPO's ratio and advantage live (§3.2.2); with ``--ngram 1`` it
  equals ``token``;
- ``sequence``: the whole response, the product over all its tokens.

Each token carries its unit's weight (broadcast like the macro advantage, Appendix E), detached: the weight
rescales the gradient, it is not differentiated.

``agg="geo"`` takes the geometric mean of the unit's token ratios instead of their product (veRL's geometric
rejection, SkyRL's [0.99, 1.01] sequence mask): a long unit's weight then stays near 1 when each token's does.
``mode`` says what a weight w outside its bounds becomes (:func:`bounded_weights`): ``truncate`` clamps it into
[low, C] (TIS; TRL's ``*_truncate`` with ``vllm_importance_sampling_clip_min`` = low), ``mask`` sets it to 0 (MIS,
IcePop; TRL's ``*_mask``): the unit's tokens then add nothing to the loss but keep their place in its denominator
(as TRL, which multiplies the per-token loss by the weight; docs/objective.md says why).

π_engine is per token: with partial rollouts (``--partial_rollout``, :mod:`dschat.rlhf.rollout.partial`) token t's
is the policy version v_t that sampled it, so a macro spanning two versions takes the product of its tokens' own
ratios, w_τ = min(Π_{t∈ω_τ} π_old(a_t)/π_{v_t}(a_t), C).
"""
from __future__ import annotations

from typing import Dict, Optional

import torch

from .choices import ROLLOUT_IS_AGGS, ROLLOUT_IS_LEVELS, ROLLOUT_IS_MODES
from .losses import MAX_LOG_RATIO, masked_mean
from .segments import as_action_mask, check_same_shape, segment_mean, segment_sum, to_tokens


def bounded_weights(log_ratio: torch.Tensor, mode: str, low: float, cap: float) -> torch.Tensor:
    """w = exp(log_ratio) (log-ratio capped at :data:`MAX_LOG_RATIO`) brought into [``low``, ``cap``]: clamped
    (``truncate``) or set to 0 outside it (``mask``; w = ``low`` or ``cap`` stays)."""
    if mode not in ROLLOUT_IS_MODES:
        raise ValueError(f"mode must be one of {ROLLOUT_IS_MODES}, got {mode!r}")
    weights = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    if mode == "truncate":
        return weights.clamp(min=low, max=cap)
    return torch.where((weights >= low) & (weights <= cap), weights, torch.zeros_like(weights))


def importance_weights(old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, action_mask: torch.Tensor,
                       level: str, cap: float, segment_ids: Optional[torch.Tensor] = None, mode: str = "truncate",
                       low: float = 0.0, agg: str = "product") -> torch.Tensor:
    """``[B, T]`` detached importance weights π_old/π_engine at ``level`` (module docstring), combined over a unit
    by ``agg`` and bounded by ``mode`` into [``low``, ``cap``] (:func:`bounded_weights`; the default: truncated
    min(w, ``cap``)), each token carrying its unit's weight; 0 off the response. ``level="none"`` gives 1 on the
    response."""
    if level not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"level must be one of {ROLLOUT_IS_LEVELS}, got {level!r}")
    if agg not in ROLLOUT_IS_AGGS:
        raise ValueError(f"agg must be one of {ROLLOUT_IS_AGGS}, got {agg!r}")
    if cap <= 0 or not 0 <= low < cap:
        raise ValueError(f"need 0 <= low < cap, got low={low!r}, cap={cap!r}")
    on = as_action_mask(action_mask)
    check_same_shape("old_logprobs", old_logprobs, on, "action_mask")
    check_same_shape("engine_logprobs", engine_logprobs, on, "action_mask")
    zero = torch.zeros((), dtype=old_logprobs.dtype, device=old_logprobs.device)
    with torch.no_grad():
        if level == "none":
            return on.to(old_logprobs.dtype)
        log_ratio = torch.where(on, old_logprobs.detach() - engine_logprobs.detach(), zero)
        if level == "macro":
            if segment_ids is None:
                raise ValueError('segment_ids is required with level="macro"')
            pool = segment_mean if agg == "geo" else segment_sum
            log_ratio = to_tokens(pool(log_ratio, segment_ids)[0], segment_ids)
        elif level == "sequence":
            log_ratio = log_ratio.sum(dim=1, keepdim=True)
            if agg == "geo":
                log_ratio = log_ratio / on.sum(dim=1, keepdim=True).clamp(min=1)
            log_ratio = log_ratio.expand_as(on)
        return torch.where(on, bounded_weights(log_ratio, mode, low, cap), zero)


def correction_statistics(weights: torch.Tensor, old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor,
                          action_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
    """The correction's metrics over response tokens: ``is_weight_mean`` (the mean weight), ``is_masked`` (the
    fraction of tokens whose weight is 0: their unit masked) and the mismatch KL(π_engine ‖ π_old) on the engine's
    samples with k1 = log π_engine − log π_old and k3 = (r − 1) − log r, r = π_old/π_engine (Schulman 2020)."""
    on = as_action_mask(action_mask)
    with torch.no_grad():
        diff = torch.where(on, old_logprobs.detach() - engine_logprobs.detach(), torch.zeros_like(old_logprobs))
        return {"is_weight_mean": masked_mean(weights, on),
                "is_masked": masked_mean((weights == 0).to(weights.dtype), on),
                "mismatch_kl_k1": masked_mean(-diff, on),
                "mismatch_kl_k3": masked_mean(torch.expm1(diff) - diff, on)}


def logprob_gap(old_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, action_mask: torch.Tensor
                ) -> Dict[str, torch.Tensor]:
    """How far the engine's sampled-token log-probs are from the trainer's, over response tokens: the mean and
    max of |log π_old − log π_engine| and KL(π_engine ‖ π_old) estimated on the engine's own samples with k3,
    (r − 1) − log r for r = π_old/π_engine (unbiased, non-negative; Schulman 2020)."""
    on = as_action_mask(action_mask)
    with torch.no_grad():
        diff = torch.where(on, old_logprobs.detach() - engine_logprobs.detach(), torch.zeros_like(old_logprobs))
        absolute = diff.abs()
        return {"logprob_abs_diff": masked_mean(absolute, on),
                "logprob_abs_diff_max": absolute.max() if on.any() else absolute.new_zeros(()),
                "kl_engine_trainer": masked_mean(torch.expm1(diff) - diff, on)}
