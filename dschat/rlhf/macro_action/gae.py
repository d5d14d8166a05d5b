"""Generalised advantage estimation over macro steps (paper §3.2.2, Algorithm 1, Appendix E) and whitening."""
from __future__ import annotations

from typing import Tuple

import torch

from .segments import check_same_shape, work_dtype


def _check_unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")


def macro_gae(macro_values: torch.Tensor, macro_rewards: torch.Tensor, macro_mask: torch.Tensor,
              gamma: float = 1.0, lam: float = 0.95) -> Tuple[torch.Tensor, torch.Tensor]:
    """GAE over the macro axis: ``(advantages [B, M], returns [B, M])``.

    δ_τ = R_τ + γ V(s_{τ+1}) − V(s_τ),  Â_τ = δ_τ + γλ Â_{τ+1},  Q̂_τ = Â_τ + V(s_τ)  (returns are the
    Q-value targets of the critic). The value after a row's last macro is 0 (the episode ends). Masked macros
    (rows have different numbers of macros) are ignored whatever they hold and come out as 0; a masked macro
    inside a row would end the episode there. The recursion loops backwards over the macro axis, vectorised
    over the batch; with one macro per token this is exactly token-level GAE.
    """
    check_same_shape("macro_rewards", macro_rewards, macro_values, "macro_values")
    check_same_shape("macro_mask", macro_mask, macro_values, "macro_values")
    _check_unit_interval("gamma", gamma)
    _check_unit_interval("lam", lam)
    mask = macro_mask.bool()
    dtype = torch.promote_types(work_dtype(macro_values), macro_rewards.dtype)
    zero = torch.zeros((), dtype=dtype, device=macro_values.device)
    values = torch.where(mask, macro_values.to(dtype), zero)
    rewards = torch.where(mask, macro_rewards.to(dtype), zero)
    next_values = torch.nn.functional.pad(values[:, 1:], (0, 1))
    deltas = torch.where(mask, rewards + gamma * next_values - values, zero)
    # Â_τ = δ_τ + γλ·[macro τ and τ+1 both exist]·Â_{τ+1}: one fused multiply-add per macro step
    continues = mask & torch.nn.functional.pad(mask[:, 1:], (0, 1), value=False)
    carries = continues.to(dtype) * (gamma * lam)

    running = torch.zeros(values.shape[0], dtype=dtype, device=values.device)
    reversed_advantages = []
    for delta, carry in zip(reversed(deltas.unbind(dim=1)), reversed(carries.unbind(dim=1))):
        running = torch.addcmul(delta, carry, running)
        reversed_advantages.append(running)
    advantages = torch.stack(reversed_advantages[::-1], dim=1) if reversed_advantages else torch.zeros_like(values)
    returns = torch.where(mask, advantages + values, zero)
    return advantages, returns


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean) / sqrt(var + eps) with mean and (population) variance over the positions where ``mask`` is
    set; with ``shift_mean=False`` the mean is added back (only the scale changes). 0 where ``mask`` is 0.
    Whitening broadcast token advantages weights each macro by its number of tokens."""
    check_same_shape("mask", mask, x, "x")
    on = mask.bool()
    count = on.sum().clamp(min=1)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    mean = torch.where(on, x, zero).sum() / count
    variance = torch.where(on, (x - mean) ** 2, zero).sum() / count
    whitened = (x - mean) * torch.rsqrt(variance + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(on, whitened, zero)
