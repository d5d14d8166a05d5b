"""DAPO's reward-side knobs for critic-free groups (Yu et al. 2025, §3.2 and §3.4): dynamic sampling
(``--filter_groups``: a group whose K scores are all equal has zero advantage under every group baseline, so it
only dilutes the batch; its prompt is sampled again) and the soft overlong penalty (``--overlong_buffer_len``).

Pure functions over ``[B]`` tensors whose rows hold G groups of K contiguous samples (the layout of
:func:`dschat.rlhf.experience.rollout_prompts`); the trainer (:meth:`~dschat.rlhf.ppo_trainer.PPOTrainer.make_experience`)
does the sampling.
"""
from __future__ import annotations

from typing import List

import torch


def constant_groups(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[G]`` bool: the groups of K contiguous ``scores`` that are all equal (DAPO's filter, on the score the
    reward model or function gives, before the KL term, which is never exactly equal)."""
    if scores.dim() != 1 or group_size < 1 or scores.shape[0] % group_size:
        raise ValueError(f"scores must be [G x K] with K = {group_size}, got shape {tuple(scores.shape)}")
    groups = scores.view(-1, group_size)
    return (groups == groups[:, :1]).all(dim=1)


def group_rows(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """The row indices ``[len(groups) x K]`` of the groups ``groups`` (indices ``[n]``), in order."""
    return (groups.unsqueeze(1) * group_size + torch.arange(group_size, device=groups.device)).reshape(-1)


def pad_columns(tensors: List[torch.Tensor], value) -> List[torch.Tensor]:
    """``[B_i, T_i]`` tensors right-padded with ``value`` to the widest ``T``, so their rows can be exchanged
    (a response padded after its EOS stays the same response: the masks end at the first EOS)."""
    width = max(tensor.shape[1] for tensor in tensors)
    return [torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]), value=value) for tensor in tensors]


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer_len: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), ``[B]``, added to the score: 0 for |y| ≤ L_max −
    L_cache, ``factor`` · ((L_max − L_cache) − |y|) / L_cache inside the buffer (down to −``factor`` at L_max),
    −``factor`` beyond; L_max = ``max_length`` (``--max_new_tokens``), L_cache = ``buffer_len``, 0 = off."""
    if buffer_len <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    expected = max_length - buffer_len
    over = (lengths.float() - expected).clamp(min=0, max=buffer_len)
    return -factor * over / buffer_len
