"""The units of the clipped policy objective and how their terms become one loss (``--ratio``, ``--loss_agg``).

One objective at every level. A *unit* u is a set of response tokens whose ratio is clipped once with one
advantage: a token, a macro action of the termination rule (§3.2.1), or the whole response. Its log-ratio is

- ``token``: log r_t = log π(a_t|s_t) − log π_old(a_t|s_t);
- ``macro``: Σ_{t∈ω_τ} log r_t, the macro's likelihood ratio π(ω_τ|s_τ)/π_old(ω_τ|s_τ) (MA-PPO, §3.2.2);
- ``macro_geo``: (1/|ω_τ|)·Σ_{t∈ω_τ} log r_t, its geometric mean (length-normalised): GSPO's ratio taken per macro;
- ``sequence_geo``: (1/|y|)·Σ_{t∈y} log r_t over the whole response y, GSPO's s_i(θ) (Zheng et al. 2025, eq. 7).

With ``--ngram 1`` every macro is one token, so ``macro`` and ``macro_geo`` are ``token``; a response that is one
macro makes ``macro_geo`` equal ``sequence_geo``. The clip is asymmetric, clip(r, 1 − ε_low, 1 + ε_high) (DAPO's
clip-higher, Yu et al. 2025, eq. 10). The unit's advantage is the mean of its tokens' advantages (they carry their
macro's, or with a critic-free ``--algo`` the sequence's, broadcast, so the mean is that value).

Aggregation (:func:`aggregate`, veRL's ``loss_agg_mode`` names; Dr. GRPO, Liu et al. 2025, §3 for the bias of
per-sequence length normalisation): every token carries its unit's term ℓ_t, then over the micro-batch

- ``token_mean``: Σ_t ℓ_t / N_tokens (DeepSpeed-Chat, DAPO's token-level loss; TRL ``bnpo``);
- ``seq_mean_token_sum``: (1/B)·Σ_i Σ_{t∈y_i} ℓ_t;
- ``seq_mean_token_mean``: (1/B)·Σ_i (1/|y_i|)·Σ_{t∈y_i} ℓ_t (GRPO's 1/G Σ 1/|o_i| Σ_t, TRL ``grpo``);
- ``seq_mean_token_sum_norm``: Σ_i Σ_{t∈y_i} ℓ_t / (B·L) with L = ``--max_new_tokens`` a constant (Dr. GRPO; TRL
  ``dr_grpo``);
- ``macro_mean``: (1/N_macros)·Σ_τ ℓ_τ, every macro action of the termination rule one term (the paper's E_τ),
  ℓ_τ the mean of its tokens' ℓ_t (its own term when the units are those macros).

B counts the rows that have response tokens (a dropped sample is not a sequence).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .choices import LOSS_AGGS, RATIOS
from .segments import segment_mean, segment_sum, to_tokens

MACRO_RATIOS = ("macro", "macro_geo")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(x·mask) / sum(mask) (DeepSpeed-Chat's reduction); 0 when the mask is empty; ignores x off the mask."""
    on = mask.bool()
    return torch.where(on, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum() / on.sum().clamp(min=1)


def whole_response_segments(action_mask: torch.Tensor) -> torch.Tensor:
    """Segment ids making each row's response one unit: 0 on response tokens, −1 elsewhere."""
    on = action_mask.bool()
    return torch.where(on, torch.zeros_like(on, dtype=torch.long), torch.full_like(on, -1, dtype=torch.long))


def unit_segments(ratio: str, segment_ids: Optional[torch.Tensor], action_mask: torch.Tensor
                  ) -> Optional[torch.Tensor]:
    """The segment ids of ``ratio``'s units: None for tokens, the termination rule's ``segment_ids`` for the macro
    ratios, one segment per response for ``sequence_geo``."""
    if ratio not in RATIOS:
        raise ValueError(f"ratio must be one of {RATIOS}, got {ratio!r}")
    if ratio == "token":
        return None
    if ratio == "sequence_geo":
        return whole_response_segments(action_mask)
    if segment_ids is None:
        raise ValueError(f"segment_ids is required with ratio={ratio!r}")
    return segment_ids


def unit_log_ratio(token_log_ratio: torch.Tensor, units: torch.Tensor, geometric: bool
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``([B, U] log-ratio of each unit, unit mask)``: the sum of its tokens' log-ratios (the product of their
    ratios), or with ``geometric`` their mean (the geometric mean of the ratios)."""
    return segment_mean(token_log_ratio, units) if geometric else segment_sum(token_log_ratio, units)


def clipped_objective(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(−min(r·Â, clip(r, 1 − ε_low, 1 + ε_high)·Â), clipped term active)`` per unit (PPO's surrogate with
    DAPO's decoupled bounds, Yu et al. 2025 eq. 10)."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    return torch.max(unclipped, clipped), clipped > unclipped


def aggregate(unit_terms: torch.Tensor, unit_mask: torch.Tensor, action_mask: torch.Tensor, loss_agg: str,
              units: Optional[torch.Tensor] = None, segment_ids: Optional[torch.Tensor] = None,
              units_are_macros: bool = False, norm_length: Optional[int] = None) -> torch.Tensor:
    """The loss of the micro-batch from each unit's term ``unit_terms`` ``[B, U]`` (``units``: their segment ids,
    None when the units are tokens and ``unit_terms`` is ``[B, T]``) by ``loss_agg`` (module docstring).
    ``macro_mean`` reads the termination rule's ``segment_ids`` (not read when ``units_are_macros``: the units are
    those macros); ``seq_mean_token_sum_norm`` divides by ``norm_length`` L."""
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"loss_agg must be one of {LOSS_AGGS}, got {loss_agg!r}")
    on = action_mask.bool()
    if loss_agg == "macro_mean" and units_are_macros:
        return masked_mean(unit_terms, unit_mask)
    tokens = unit_terms if units is None else to_tokens(unit_terms, units)
    if loss_agg == "token_mean":
        return masked_mean(tokens, on)
    if loss_agg == "macro_mean":
        if segment_ids is None:
            raise ValueError("segment_ids is required with loss_agg='macro_mean'")
        macro_terms, macro_mask = segment_mean(tokens, segment_ids)
        return masked_mean(macro_terms, macro_mask)
    zero = torch.zeros((), dtype=tokens.dtype, device=tokens.device)
    row_sums = torch.where(on, tokens, zero).sum(dim=1)
    rows = on.any(dim=1).sum().clamp(min=1)
    if loss_agg == "seq_mean_token_sum":
        return row_sums.sum() / rows
    if loss_agg == "seq_mean_token_mean":
        return (row_sums / on.sum(dim=1).clamp(min=1)).sum() / rows
    if norm_length is None or norm_length < 1:
        raise ValueError(f"loss_agg='seq_mean_token_sum_norm' needs norm_length >= 1, got {norm_length!r}")
    return row_sums.sum() / (rows * norm_length)
