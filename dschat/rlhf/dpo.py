"""Direct Preference Optimization (Rafailov et al., 2023), the offline baseline of the paper's Appendix C.3 /
Table 7: pure functions over per-token log-probs, no model or trainer state.

Layout: the pair batch of :class:`~dschat.data.PairCollator`, ``[chosen..., rejected...]`` (row i pairs
with row B + i). Log-prob tensors are ``[2B, T-1]`` (position t scores token t + 1, as
:func:`dschat.rlhf.experience.sequence_logprobs` returns them); a response mask over tokens ``[2B, T]`` becomes
a mask over log-prob positions with :func:`logprob_positions`.
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch
import torch.nn.functional as F


def logprob_positions(token_mask: torch.Tensor) -> torch.Tensor:
    """A mask over tokens ``[B, T]`` as a mask over log-prob positions ``[B, T-1]`` (position t scores token
    t + 1; the first token is never scored)."""
    return token_mask[:, 1:]


def response_logprob_sums(token_logprobs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log π(y | x) = Σ_t log π(y_t | x, y_<t) over the response tokens (and eos), ``[B]``."""
    if token_logprobs.shape != response_mask.shape:
        raise ValueError(f"response_mask must have the shape of token_logprobs {tuple(token_logprobs.shape)}, "
                         f"got {tuple(response_mask.shape)}")
    return (token_logprobs * response_mask.to(token_logprobs.dtype)).sum(dim=1)


def implicit_rewards(policy_logps: torch.Tensor, reference_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's implicit reward r̂(x, y) = β·(log π(y|x) − log π_ref(y|x)) per sequence (log-probs summed over the
    response tokens)."""
    return beta * (policy_logps - reference_logps)


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             reference_chosen_logps: torch.Tensor, reference_rejected_logps: torch.Tensor,
             beta: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Sigmoid DPO loss −log σ(r̂(x, y+) − r̂(x, y−)) averaged over pairs, and its statistics.

    Inputs are ``[B]`` sequence log-probs (summed over response tokens) of the chosen and rejected responses
    under the policy and the frozen reference. Stats (detached): ``chosen_reward`` / ``rejected_reward`` (mean
    implicit rewards), ``margin`` (their mean difference) and ``accuracy`` (fraction of pairs whose chosen
    implicit reward is strictly higher).
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")
    shape = policy_chosen_logps.shape
    for name, tensor in (("policy_rejected_logps", policy_rejected_logps),
                         ("reference_chosen_logps", reference_chosen_logps),
                         ("reference_rejected_logps", reference_rejected_logps)):
        if tensor.shape != shape:
            raise ValueError(f"{name} must have the shape of policy_chosen_logps {tuple(shape)}, "
                             f"got {tuple(tensor.shape)}")
    chosen = implicit_rewards(policy_chosen_logps, reference_chosen_logps, beta)
    rejected = implicit_rewards(policy_rejected_logps, reference_rejected_logps, beta)
    loss = -F.logsigmoid(chosen - rejected).mean()
    with torch.no_grad():
        stats = {"chosen_reward": chosen.mean(), "rejected_reward": rejected.mean(),
                 "margin": (chosen - rejected).mean(), "accuracy": (chosen > rejected).float().mean()}
    return loss, stats
