"""Test oracle and benchmark baseline for ``dschat.rlhf.macro_action`` and ``dschat.rlhf.kl``.

Deliberately plain: per-sample, per-macro, per-token Python loops on Python floats (double precision), the
released code's approach done right, written without looking at the vectorised implementation. Two parts:

- the macro pipeline: segmentations as per-row lists of macro lengths, σ-pooled macro values, summed / averaged
  macro rewards, per-sample GAE over macros, broadcast, clipped losses (token or macro ratio);
- a token-level PPO reference with DeepSpeed-Chat semantics (``compute_rewards``, ``get_advantages_and_returns``,
  ``actor_loss_fn``, ``critic_loss_fn``), written independently, with the reward at the last real response token
  and a per-row response start/end so that any padding side works.

Functions take ``[B, T]`` torch tensors (or nested lists) and return nested Python lists or floats.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

import torch

Rows = List[List[float]]


def as_rows(tensor) -> list:
    """A tensor as nested Python lists (a nested list is returned unchanged)."""
    return tensor.tolist() if isinstance(tensor, torch.Tensor) else tensor


def response_positions(mask_row: Sequence) -> List[int]:
    """Positions of the response tokens of one row, in order."""
    return [position for position, flag in enumerate(mask_row) if flag]


# ----------------------------------------------------------------------------------------------------------
# Segmentations, as one list of macro lengths per row
# ----------------------------------------------------------------------------------------------------------

def fixed_ngram_lengths(n_tokens: int, n: Optional[int]) -> List[int]:
    """Macro lengths of a response of ``n_tokens`` cut into n-grams (None: one macro)."""
    lengths, remaining = [], n_tokens
    while remaining > 0:
        take = remaining if n is None else min(n, remaining)
        lengths.append(take)
        remaining -= take
    return lengths


def table_lengths(n_tokens: int, table: Sequence[int]) -> List[int]:
    """Macro lengths consuming ``table`` in order; tokens left over after the whole table are one macro."""
    lengths, remaining = [], n_tokens
    for entry in table:
        if remaining == 0:
            break
        take = min(entry, remaining)
        lengths.append(take)
        remaining -= take
    if remaining > 0:
        lengths.append(remaining)
    return lengths


def ppl_lengths(nll: Sequence[float]) -> List[int]:
    """Running-perplexity macros: a token starts a new macro iff its NLL exceeds the current macro's mean NLL."""
    lengths: List[int] = []
    total = 0.0
    for value in nll:
        if not lengths or value > total / lengths[-1]:
            lengths.append(1)
            total = value
        else:
            lengths[-1] += 1
            total += value
    return lengths


def mask_lengths(action_mask) -> List[int]:
    """Number of response tokens of each row."""
    return [len(response_positions(row)) for row in as_rows(action_mask)]


def fixed_ngram_segmentation(action_mask, n: Optional[int]) -> List[List[int]]:
    return [fixed_ngram_lengths(count, n) for count in mask_lengths(action_mask)]


def table_segmentation(action_mask, tables) -> List[List[int]]:
    return [table_lengths(count, table) for count, table in zip(mask_lengths(action_mask), as_rows(tables))]


def ppl_segmentation(logprobs, action_mask) -> List[List[int]]:
    segmentation = []
    for lp_row, mask_row in zip(as_rows(logprobs), as_rows(action_mask)):
        segmentation.append(ppl_lengths([-lp_row[position] for position in response_positions(mask_row)]))
    return segmentation


def segment_ids(action_mask, segmentation: List[List[int]]) -> List[List[int]]:
    """Segment-id rows (-1 off the response) from per-row macro lengths."""
    result = []
    for mask_row, lengths in zip(as_rows(action_mask), segmentation):
        row = [-1] * len(mask_row)
        positions = response_positions(mask_row)
        cursor = 0
        for macro, length in enumerate(lengths):
            for position in positions[cursor:cursor + length]:
                row[position] = macro
            cursor += length
        assert cursor == len(positions), "segmentation does not cover the response"
        result.append(row)
    return result


def lengths_of_segment_ids(ids_row: Sequence[int]) -> List[int]:
    """Macro lengths read back from one row of segment ids."""
    lengths: List[int] = []
    previous = None
    for macro in ids_row:
        if macro < 0:
            continue
        if macro != previous:
            lengths.append(0)
            previous = macro
        lengths[-1] += 1
    return lengths


def split_macros(row: Sequence[float], positions: List[int], lengths: List[int]) -> List[List[float]]:
    """The row's response values grouped by macro."""
    macros, cursor = [], 0
    for length in lengths:
        macros.append([row[position] for position in positions[cursor:cursor + length]])
        cursor += length
    return macros


# ----------------------------------------------------------------------------------------------------------
# Macro pipeline
# ----------------------------------------------------------------------------------------------------------

def sigma_weights(length: int, sigma: str) -> List[float]:
    """σ of Appendix D.1 for a macro of ``length`` tokens."""
    if sigma == "equal":
        return [1.0 / length] * length
    if sigma == "unit":
        return [0.0] * (length - 1) + [1.0]
    if sigma == "position":
        harmonic = sum(1.0 / (length - i) for i in range(length))
        return [1.0 / ((length - i) * harmonic) for i in range(length)]
    raise ValueError(sigma)


def macro_value(values: List[float], sigma: str) -> float:
    return sum(w * v for w, v in zip(sigma_weights(len(values), sigma), values))


def macro_reward(rewards: List[float], agg: str) -> float:
    return sum(rewards) if agg == "sum" else sum(rewards) / len(rewards)


def gae(values: List[float], rewards: List[float], gamma: float, lam: float):
    """GAE over one episode, value after the last step 0: (advantages, returns)."""
    advantages = [0.0] * len(values)
    running = 0.0
    for step in reversed(range(len(values))):
        next_value = values[step + 1] if step + 1 < len(values) else 0.0
        delta = rewards[step] + gamma * next_value - values[step]
        running = delta + gamma * lam * running
        advantages[step] = running
    return advantages, [a + v for a, v in zip(advantages, values)]


def macro_pooled(values, segmentation, action_mask, sigma: str, agg: Optional[str] = None) -> List[List[float]]:
    """Per-row lists of macro values (σ pooling) or, with ``agg``, macro rewards."""
    pooled = []
    for row, mask_row, lengths in zip(as_rows(values), as_rows(action_mask), segmentation):
        macros = split_macros(row, response_positions(mask_row), lengths)
        pooled.append([macro_reward(m, agg) if agg else macro_value(m, sigma) for m in macros])
    return pooled


def macro_advantages(values, rewards, action_mask, segmentation, sigma="equal", agg="sum", gamma=1.0, lam=0.95):
    """Token advantages and returns ``[B][T]`` (0 off the response), one sample and one macro at a time."""
    advantages_rows, returns_rows = [], []
    for v_row, r_row, mask_row, lengths in zip(as_rows(values), as_rows(rewards), as_rows(action_mask),
                                               segmentation):
        positions = response_positions(mask_row)
        macro_v = [macro_value(m, sigma) for m in split_macros(v_row, positions, lengths)]
        macro_r = [macro_reward(m, agg) for m in split_macros(r_row, positions, lengths)]
        macro_a, macro_q = gae(macro_v, macro_r, gamma, lam)
        advantages, returns = [0.0] * len(mask_row), [0.0] * len(mask_row)
        cursor = 0
        for macro, length in enumerate(lengths):
            for position in positions[cursor:cursor + length]:
                advantages[position] = macro_a[macro]
                returns[position] = macro_q[macro]
            cursor += length
        advantages_rows.append(advantages)
        returns_rows.append(returns)
    return advantages_rows, returns_rows


def policy_loss(logprobs, old_logprobs, advantages, action_mask, segmentation, clip_eps, ratio="token"):
    """(loss, clipfrac): token ratio averaged over response tokens, or macro ratio averaged over macros."""
    total, clipped_units, units = 0.0, 0, 0
    for lp, old, adv, mask_row, lengths in zip(as_rows(logprobs), as_rows(old_logprobs), as_rows(advantages),
                                               as_rows(action_mask), segmentation):
        positions = response_positions(mask_row)
        if ratio == "token":
            groups = [[position] for position in positions]
        else:
            groups, cursor = [], 0
            for length in lengths:
                groups.append(positions[cursor:cursor + length])
                cursor += length
        for group in groups:
            log_ratio = sum(lp[p] - old[p] for p in group)
            advantage = sum(adv[p] for p in group) / len(group)
            r = math.exp(log_ratio)
            unclipped = -advantage * r
            clipped = -advantage * min(max(r, 1.0 - clip_eps), 1.0 + clip_eps)
            total += max(unclipped, clipped)
            clipped_units += clipped > unclipped
            units += 1
    return total / max(units, 1), clipped_units / max(units, 1)


def masked_whiten(x, action_mask, shift_mean=True, eps=1e-8) -> Rows:
    selected = [v for row, m_row in zip(as_rows(x), as_rows(action_mask)) for v, m in zip(row, m_row) if m]
    mean = sum(selected) / len(selected)
    variance = sum((v - mean) ** 2 for v in selected) / len(selected)
    scale = 1.0 / math.sqrt(variance + eps)
    return [[((v - mean) * scale + (0.0 if shift_mean else mean)) if m else 0.0 for v, m in zip(row, m_row)]
            for row, m_row in zip(as_rows(x), as_rows(action_mask))]


# ----------------------------------------------------------------------------------------------------------
# Token-level PPO reference (DeepSpeed-Chat semantics, per-row start/end)
# ----------------------------------------------------------------------------------------------------------

def token_advantages(values, rewards, action_mask, gamma=1.0, lam=0.95):
    """DeepSpeed-Chat ``get_advantages_and_returns``: values and rewards zeroed from the row's end on, GAE
    backwards from the last position to the response start, ``returns = advantages + values``."""
    advantages_rows, returns_rows = [], []
    for v_row, r_row, mask_row in zip(as_rows(values), as_rows(rewards), as_rows(action_mask)):
        length = len(mask_row)
        positions = response_positions(mask_row)
        advantages, returns = [0.0] * length, [0.0] * length
        if positions:
            start, end = positions[0], positions[-1] + 1
            v = [value if t < end else 0.0 for t, value in enumerate(v_row)]
            r = [reward if t < end else 0.0 for t, reward in enumerate(r_row)]
            last_gae = 0.0
            for t in reversed(range(start, length)):
                next_value = v[t + 1] if t < length - 1 else 0.0
                delta = r[t] + gamma * next_value - v[t]
                last_gae = delta + gamma * lam * last_gae
                advantages[t] = last_gae
            for t in range(start, end):
                returns[t] = advantages[t] + v[t]
        advantages_rows.append(advantages)
        returns_rows.append(returns)
    return advantages_rows, returns_rows


def token_actor_loss(logprobs, old_logprobs, advantages, action_mask, clip_eps) -> float:
    """DeepSpeed-Chat ``actor_loss_fn``."""
    total, count = 0.0, 0
    for lp, old, adv, mask_row in zip(as_rows(logprobs), as_rows(old_logprobs), as_rows(advantages),
                                      as_rows(action_mask)):
        for t, flag in enumerate(mask_row):
            if flag:
                r = math.exp(lp[t] - old[t])
                total += max(-adv[t] * r, -adv[t] * min(max(r, 1.0 - clip_eps), 1.0 + clip_eps))
                count += 1
    return total / max(count, 1)


def token_critic_loss(values, old_values, returns, action_mask, value_clip) -> float:
    """DeepSpeed-Chat ``critic_loss_fn``."""
    total, count = 0.0, 0
    for v, old, ret, mask_row in zip(as_rows(values), as_rows(old_values), as_rows(returns), as_rows(action_mask)):
        for t, flag in enumerate(mask_row):
            if flag:
                clipped = min(max(v[t], old[t] - value_clip), old[t] + value_clip)
                total += 0.5 * max((v[t] - ret[t]) ** 2, (clipped - ret[t]) ** 2)
                count += 1
    return total / max(count, 1)


def kl_value(logprob: float, ref_logprob: float, estimator: str) -> float:
    log_ratio = ref_logprob - logprob
    if estimator == "k1":
        return logprob - ref_logprob
    if estimator == "k2":
        return 0.5 * log_ratio * log_ratio
    return math.exp(log_ratio) - 1.0 - log_ratio


def token_rewards(logprobs, ref_logprobs, scores, action_mask, kl_coef, reward_clip, estimator="k1") -> Rows:
    """DeepSpeed-Chat ``compute_rewards`` with the score at the last real response token."""
    rows = []
    for lp, ref, score, mask_row in zip(as_rows(logprobs), as_rows(ref_logprobs), as_rows(scores),
                                        as_rows(action_mask)):
        row = [(-kl_coef * kl_value(lp[t], ref[t], estimator)) if flag else 0.0 for t, flag in enumerate(mask_row)]
        positions = response_positions(mask_row)
        if positions:
            clipped = score if reward_clip is None else min(max(score, -reward_clip), reward_clip)
            row[positions[-1]] += clipped
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------------------
# Test batches
# ----------------------------------------------------------------------------------------------------------

def action_mask_from_spans(spans: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """``[B, width]`` long mask with row ``b`` set on ``[start, start + length)`` for ``spans[b] = (start, length)``."""
    mask = torch.zeros(len(spans), width, dtype=torch.long)
    for row, (start, length) in enumerate(spans):
        mask[row, start:start + length] = 1
    return mask


def random_action_mask(batch_size: int, width: int, generator: torch.Generator, allow_empty: bool = True
                       ) -> torch.Tensor:
    """Ragged responses: a random start (left-padded prompts of different lengths) and a random length
    (right padding); some rows run to the last position, one row may have no response token."""
    spans = []
    for row in range(batch_size):
        start = int(torch.randint(0, width // 2, (1,), generator=generator))
        if row % 3 == 0:
            length = width - start
        else:
            length = int(torch.randint(1, width - start + 1, (1,), generator=generator))
        spans.append((start, length))
    if allow_empty and batch_size > 1:
        spans[-1] = (spans[-1][0], 0)
    return action_mask_from_spans(spans, width)


def random_tensors(shape, generator: torch.Generator, count: int, dtype=torch.float64, scale: float = 1.0):
    """``count`` independent standard-normal tensors (times ``scale``)."""
    return [torch.randn(*shape, generator=generator, dtype=dtype) * scale for _ in range(count)]
