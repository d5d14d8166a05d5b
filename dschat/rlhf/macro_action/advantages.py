"""The one entry point the PPO trainer calls to turn per-token values and rewards into (macro) advantages:
macro pooling (Appendix D.1) → macro GAE (§3.2.2) → broadcast back to tokens (Appendix E)."""
from __future__ import annotations

from typing import Dict, Tuple

import torch

from .gae import macro_gae
from .segments import (as_action_mask, check_same_shape, macro_rewards, macro_values, to_tokens,
                       validate_segment_ids)


def macro_statistics(segment_ids: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
                     action_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Detached 0-dim statistics over the responses of the batch (rows with at least one response token):

    ``macro_length_mean`` (tokens per macro), ``macros_per_response``, and ``advantage_l2`` /
    ``return_l2``: the mean over responses of the L2 norm of the response's token advantages / Q-value
    targets (paper Fig. 11; token-level so that MA-PPO and PPO are measured alike).
    """
    on = action_mask.bool()
    tokens = on.sum(dim=1)
    has_response = tokens > 0
    responses = has_response.sum().clamp(min=1)
    macros = segment_ids.max(dim=1).values + 1
    zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
    advantage_norm = torch.where(on, advantages, zero).pow(2).sum(dim=1).sqrt()
    return_norm = torch.where(on, returns, zero).pow(2).sum(dim=1).sqrt()
    return {
        "macro_length_mean": tokens.sum().float() / macros.sum().clamp(min=1).float(),
        "macros_per_response": macros.sum().float() / responses.float(),
        "advantage_l2": advantage_norm.sum() / responses,
        "return_l2": return_norm.sum() / responses,
    }


@torch.no_grad()
def compute_macro_advantages(values: torch.Tensor, rewards: torch.Tensor, segment_ids: torch.Tensor,
                             action_mask: torch.Tensor, sigma: str = "equal", reward_agg: str = "sum",
                             gamma: float = 1.0, lam: float = 0.95
                             ) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, torch.Tensor]]:
    """Token advantages and returns ``[B, T]`` (0 off the response) from old critic ``values`` and per-token
    ``rewards`` ``[B, T]`` under the segmentation ``segment_ids``, plus :func:`macro_statistics`.

    Macro values pool the token values with σ (``equal | unit | position``), macro rewards sum (or average,
    ``reward_agg="mean"``) the token rewards, GAE runs over macro steps, and every token of a macro receives
    the macro's advantage and return. With one macro per token (``ngram_segments(mask, 1)``) this is exactly
    token-level PPO whatever σ and ``reward_agg``. Runs without autograd. Results are at least float32.
    """
    on = as_action_mask(action_mask)
    check_same_shape("values", values, on, "action_mask")
    check_same_shape("rewards", rewards, on, "action_mask")
    validate_segment_ids(segment_ids, on)
    pooled_values, macro_mask = macro_values(values, segment_ids, sigma)
    pooled_rewards, _ = macro_rewards(rewards, segment_ids, reward_agg)
    macro_advantages, macro_returns = macro_gae(pooled_values, pooled_rewards, macro_mask, gamma, lam)
    advantages = to_tokens(macro_advantages, segment_ids)
    returns = to_tokens(macro_returns, segment_ids)
    return advantages, returns, macro_statistics(segment_ids, advantages, returns, on)
