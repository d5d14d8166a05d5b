"""Per-token KL estimators and the per-token PPO reward (DeepSpeed-Chat / InstructGPT reward shaping).

Tensors are ``[B, T]`` over log-prob positions (position ``t`` scores token ``seq[:, t + 1]``); ``action_mask``
is 1 exactly on response tokens, for any padding side.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def _as_mask(action_mask: torch.Tensor) -> torch.Tensor:
    if not isinstance(action_mask, torch.Tensor) or action_mask.dim() != 2:
        shape = tuple(action_mask.shape) if isinstance(action_mask, torch.Tensor) else type(action_mask).__name__
        raise ValueError(f"action_mask must be a 2-D [B, T] tensor, got {shape}")
    return action_mask.bool()


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from samples of π (Schulman, "Approximating KL divergence", 2020),
    with log r = log π_ref − log π:

    - ``k1`` = −log r = logπ − logπ_ref (unbiased, can be negative; DeepSpeed-Chat and the paper);
    - ``k2`` = ½ (log r)² (biased, low variance, ≥ 0);
    - ``k3`` = (r − 1) − log r (unbiased, ≥ 0).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(f"ref_logprobs must have the shape of logprobs {tuple(logprobs.shape)}, "
                         f"got {tuple(ref_logprobs.shape)}")
    log_ratio = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio ** 2
    return torch.expm1(log_ratio) - log_ratio


def last_response_index(action_mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` long: position of each row's last response token, -1 for a row without response tokens."""
    on = _as_mask(action_mask)
    if on.shape[1] == 0:
        return torch.full((on.shape[0],), -1, dtype=torch.long, device=on.device)
    positions = torch.arange(on.shape[1], device=on.device).expand_as(on)
    return torch.where(on, positions, torch.full_like(positions, -1)).max(dim=1).values


def token_rewards(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, scores: torch.Tensor,
                  action_mask: torch.Tensor, kl_coef: float, reward_clip: Optional[float] = None,
                  estimator: str = "k1") -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards ``[B, T]`` and the per-token KL ``[B, T]`` (both 0 off the response).

    r_t = −kl_coef · KL_t on response tokens, plus the sequence score (clipped to ±``reward_clip``; None keeps
    it as is) at the row's last real response token, wherever it lies. A row without response tokens gets
    all-zero rewards (its score has nowhere to go).
    """
    on = _as_mask(action_mask)
    if logprobs.shape != on.shape:
        raise ValueError(f"logprobs must have the shape of action_mask {tuple(on.shape)}, got {tuple(logprobs.shape)}")
    if scores.dim() != 1 or scores.shape[0] != on.shape[0]:
        raise ValueError(f"scores must be [B={on.shape[0]}], got {tuple(scores.shape)}")
    if reward_clip is not None and reward_clip <= 0:
        raise ValueError(f"reward_clip must be > 0 or None, got {reward_clip!r}")
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    kl = torch.where(on, kl_penalty(logprobs, ref_logprobs, estimator), zero)
    clipped = scores if reward_clip is None else scores.clamp(-reward_clip, reward_clip)
    last = last_response_index(on)
    score_at_end = torch.zeros_like(kl).scatter(1, last.clamp(min=0).unsqueeze(1),
                                                clipped.to(kl.dtype).unsqueeze(1))
    score_at_end = torch.where(on, score_at_end, zero)
    return -kl_coef * kl + score_at_end, kl
