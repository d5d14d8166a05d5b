"""A benchmark baseline in the style of the authors' released code (see the reference README): torch ops across
the batch inside Python loops over macro actions and macro steps, a Python loop with one ``.item()`` host sync
per token in the n-gram selector. Written correctly (per-row boundaries, no empty macro step, every row), so
that it computes what ``dschat.rlhf.macro_action`` computes and only the style differs. Not used by the
library; ``bench_macro_ops.py`` checks it against the vectorised ops before timing it.
"""
from __future__ import annotations

import torch


def ngram_segment_ids(action_mask: torch.Tensor, n: int) -> torch.Tensor:
    """Fixed n-gram boundaries, token by token with a host sync each (the released selector's loop)."""
    segment_ids = torch.full(action_mask.shape, -1, dtype=torch.long)
    for row in range(action_mask.shape[0]):
        count = 0
        for position in range(action_mask.shape[1]):
            if action_mask[row, position].item():
                segment_ids[row, position] = count // n
                count += 1
    return segment_ids.to(action_mask.device)


def _sigma_weights(in_macro: torch.Tensor, sigma: str) -> torch.Tensor:
    """σ (Appendix D.1) of one macro in every row, ``[B, T]``, from its membership mask."""
    member = in_macro.float()
    length = member.sum(dim=1, keepdim=True).clamp(min=1)
    if sigma == "equal":
        return member / length
    rank = member.cumsum(dim=1) - 1  # position inside the macro
    if sigma == "unit":
        return member * (rank == length - 1).float()
    remaining = (length - rank).clamp(min=1)  # L - i
    harmonic = torch.zeros_like(length)
    for i in range(int(length.max().item())):  # H_L = Σ_{k=1..L} 1/k, per row
        harmonic += (i < length).float() / (i + 1)
    return member / (remaining * harmonic)


def macro_advantages(values, rewards, segment_ids, sigma="equal", reward_agg="sum", gamma=1.0, lam=0.95):
    """σ-pooled macro values and macro rewards (loop over macros), GAE (loop over macro steps), broadcast
    back to tokens (loop over macros). ``(advantages, returns)`` ``[B, T]``."""
    macros = int(segment_ids.max().item()) + 1
    macro_values, macro_rewards, masks = [], [], []
    for macro in range(macros):
        in_macro = segment_ids == macro
        masks.append(in_macro)
        macro_values.append((values * _sigma_weights(in_macro, sigma)).sum(dim=1))
        total = (rewards * in_macro).sum(dim=1)
        macro_rewards.append(total if reward_agg == "sum" else total / in_macro.sum(dim=1).clamp(min=1))
    advantages, running = [None] * macros, torch.zeros_like(values[:, 0])
    for step in reversed(range(macros)):
        next_value = macro_values[step + 1] if step + 1 < macros else torch.zeros_like(running)
        delta = macro_rewards[step] + gamma * next_value - macro_values[step]
        running = delta + gamma * lam * running
        advantages[step] = running
    token_advantages = torch.zeros_like(values)
    token_returns = torch.zeros_like(values)
    for macro in range(macros):
        token_advantages = torch.where(masks[macro], advantages[macro][:, None], token_advantages)
        token_returns = torch.where(masks[macro], (advantages[macro] + macro_values[macro])[:, None], token_returns)
    return token_advantages, token_returns


def policy_loss(logprobs, old_logprobs, advantages, segment_ids, clip_eps, ratio="token"):
    """Clipped surrogate, accumulated macro by macro: the token ratio with its macro's advantage (mean over
    response tokens), or the macro ratio (mean over macros)."""
    macros = int(segment_ids.max().item()) + 1
    total, units = torch.zeros(()), torch.zeros(())
    for macro in range(macros):
        in_macro = segment_ids == macro
        present = in_macro.any(dim=1)
        if ratio == "token":
            r = torch.exp((logprobs - old_logprobs) * in_macro)
            loss = torch.max(-advantages * r, -advantages * r.clamp(1 - clip_eps, 1 + clip_eps))
            total = total + (loss * in_macro).sum()
            units = units + in_macro.sum()
        else:
            r = torch.exp(((logprobs - old_logprobs) * in_macro).sum(dim=1))
            advantage = (advantages * in_macro).sum(dim=1) / in_macro.sum(dim=1).clamp(min=1)
            loss = torch.max(-advantage * r, -advantage * r.clamp(1 - clip_eps, 1 + clip_eps))
            total = total + (loss * present).sum()
            units = units + present.sum()
    return total / units.clamp(min=1)


def value_loss(values, old_values, returns, segment_ids, value_clip):
    """Clipped value loss accumulated macro by macro, mean over response tokens."""
    macros = int(segment_ids.max().item()) + 1
    total, count = torch.zeros(()), torch.zeros(())
    for macro in range(macros):
        in_macro = segment_ids == macro
        clipped = torch.max(values, old_values - value_clip).min(old_values + value_clip)
        loss = 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2)
        total = total + (loss * in_macro).sum()
        count = count + in_macro.sum()
    return total / count.clamp(min=1)
