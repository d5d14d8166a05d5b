"""Rollouts for PPO: sampling under ZeRO-3, response masks, per-token log-probs (Algorithm 1, lines 2-4).

Layout: ``seq = [left-padded prompt | right-padded response]``, ``[B, T]``. Log-prob tensors are ``[B, T-1]``:
position ``t`` scores token ``seq[:, t+1]``; ``action_mask`` is 1 exactly where ``seq[:, t+1]`` is a real
response token (up to and including the first EOS).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import torch
from transformers import LogitsProcessor

from dschat.model import position_ids


@dataclass
class Experience:
    """One batch of rollouts with everything the PPO update needs (all tensors on the training device). The
    fields after ``segment_ids`` come from the rollout-time forwards, or — exactly on-policy — from the
    training forwards (then they are None until ``PPOTrainer.train_on_experience`` fills them)."""

    seq: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    action_mask: torch.Tensor  # [B, T-1]
    ref_logprobs: torch.Tensor  # [B, T-1]
    scores: torch.Tensor  # [B] reward-model / execution score
    segment_ids: torch.Tensor  # [B, T-1] macro index per response token, -1 elsewhere
    logprobs: Optional[torch.Tensor] = None  # [B, T-1] actor (old policy)
    values: Optional[torch.Tensor] = None  # [B, T-1] critic V(s_t)
    rewards: Optional[torch.Tensor] = None  # [B, T-1] -β·KL plus the clipped score at the last response token
    advantages: Optional[torch.Tensor] = None  # [B, T-1] macro advantage broadcast to its tokens
    returns: Optional[torch.Tensor] = None  # [B, T-1] macro return broadcast to its tokens
    engine_logprobs: Optional[torch.Tensor] = None  # [B, T-1] the rollout engine's sampled-token log-probs, if any

    def select(self, rows) -> "Experience":
        """The experience of ``rows`` (a slice or an index tensor along the batch dimension)."""
        return Experience(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[rows]
                             for f in fields(self)})

    def micro_batches(self, size: int):
        """Split along the batch dimension for gradient accumulation."""
        for start in range(0, self.seq.shape[0], size):
            yield self.select(slice(start, start + size))

    def fill_from(self, micro_batches: list) -> None:
        """Set the fields this experience lacks from its micro-batches (in order, covering every row once)."""
        for f in fields(self):
            if getattr(self, f.name) is None and getattr(micro_batches[0], f.name) is not None:
                setattr(self, f.name, torch.cat([getattr(micro, f.name) for micro in micro_batches]))


def rollout_prompts(batch: dict, samples: int, device) -> tuple:
    """``(prompts, prompt_mask, meta)`` of a prompt batch for its rollout: each prompt ``samples`` times in
    contiguous rows (App. C.3), on ``device``; ``meta`` the repeated row indices, or None."""
    prompts = batch["input_ids"].to(device).repeat_interleave(samples, dim=0)
    prompt_mask = batch["attention_mask"].to(device).repeat_interleave(samples, dim=0)
    meta = batch.get("index")
    return prompts, prompt_mask, None if meta is None else meta.repeat_interleave(samples, dim=0)


def response_mask(response: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """1 on generated tokens up to and including the first EOS (all of them when truncated), 0 after."""
    is_eos = (response == eos_token_id).long()
    eos_before = is_eos.cumsum(dim=1) - is_eos
    return (eos_before == 0).long()


def rollout_masks(seq: torch.Tensor, prompt_mask: torch.Tensor, eos_token_id: int) -> tuple:
    """``(attention_mask [B, T], action_mask [B, T-1])`` for ``seq = [prompt | response]``."""
    prompt_len = prompt_mask.shape[1]
    responses = response_mask(seq[:, prompt_len:], eos_token_id)
    attention_mask = torch.cat([prompt_mask.long(), responses], dim=1)
    action_mask = torch.zeros_like(seq[:, 1:])
    action_mask[:, prompt_len - 1:] = responses
    return attention_mask, action_mask


def trim_to_longest(seq: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor,
                    *per_position: torch.Tensor) -> tuple:
    """Drop the columns that are padding in every row (at either end), so that every forward and backward
    after generation pays for the batch's longest real sequence, not ``max_answer_seq_len`` (issue: a batch of
    ~15-token responses padded to 192). Exact: positions come from the attention mask (not the column index),
    attention is causal, and the dropped columns are masked out of attention, rewards and losses alike.

    Works for any padding side of prompt and response. The trimmed length is this process's own: under ZeRO-3
    with several processes it may differ between ranks, which is fine because no collective depends on the
    sequence length (parameters are gathered per module, gradients are parameter-shaped, metrics are scalars)
    and every rank runs the same number of forward calls (fixed by the batch size). Returns ``(seq,
    attention_mask, action_mask, *per_position)``, views of the inputs; ``per_position`` are further ``[B, T-1]``
    tensors aligned with ``action_mask`` (the rollout's entropies), trimmed alike."""
    attended = attention_mask.bool().any(dim=0)
    if not attended.any():
        return (seq, attention_mask, action_mask, *per_position)
    columns = attended.nonzero().squeeze(1)
    start, end = int(columns[0]), int(columns[-1]) + 1
    return (seq[:, start:end], attention_mask[:, start:end],
            *(tensor[:, start:end - 1] for tensor in (action_mask, *per_position)))


def chunked_rows(function, size: int, *tensors: torch.Tensor) -> torch.Tensor:
    """``function(*tensors)`` evaluated on row chunks of ``size`` and concatenated: a no-grad forward over a
    large generation batch costs the activation memory of one training micro-batch (the number of chunks, and
    so of ZeRO-3 parameter gathers, depends only on the batch size, equal on every rank). None when
    ``function`` gives None (a critic-free algorithm's values)."""
    rows = tensors[0].shape[0]
    if rows <= size:
        return function(*tensors)
    chunks = [function(*(t[start:start + size] for t in tensors)) for start in range(0, rows, size)]
    return None if chunks[0] is None else torch.cat(chunks)


def gather_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π_T(token | prefix) from logits, the softmax of ``logits / temperature`` (without materialising the full
    log-softmax twice)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def sequence_logprobs(model, seq: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
                      ) -> torch.Tensor:
    """``[B, T-1]`` log-probs of ``seq[:, 1:]`` under ``model`` at ``temperature`` (positions ignore left
    padding). PPO passes the sampling temperature, so the log-probs are those of the distribution the rollout
    was drawn from; top-k / top-p truncation is not applied (as in TRL): a truncated support would give −inf
    log-probs to tokens the updated policy or the reference ranks differently."""
    logits = model(input_ids=seq, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                   use_cache=False).logits
    return gather_logprobs(logits[:, :-1], seq[:, 1:], temperature)


class EntropyRecorder(LogitsProcessor):
    """Records, at every decoding step, the entropy (nats) of the distribution the next token is drawn from,
    softmax(logits / temperature) before top-k / top-p truncation (the distribution the log-probs score), and
    passes the logits on unchanged. Placed in ``generate``'s ``logits_processor``, it runs before the sampling
    warpers on the raw logits, at no extra forward pass (the entropy rule, policy-entropy metrics)."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.steps: list = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.steps.append(token_entropy(scores, self.temperature))
        return scores

    def entropies(self, seq: torch.Tensor, prompt_len: int) -> torch.Tensor:
        """``[B, T-1]`` entropies aligned with log-prob positions of ``seq = [prompt | response]`` (position
        ``t`` scores ``seq[:, t+1]``), 0 before the response and after the recorded steps."""
        entropy = torch.zeros(seq.shape[0], seq.shape[1] - 1, device=seq.device)
        if self.steps:
            recorded = torch.stack(self.steps, dim=1).to(entropy)
            entropy[:, prompt_len - 1:prompt_len - 1 + recorded.shape[1]] = recorded
        return entropy


def sequence_entropy(model, seq: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
                     ) -> torch.Tensor:
    """``[B, T-1]`` entropy (nats) of softmax(logits / temperature) at each log-prob position of ``seq`` under
    ``model``: what :class:`EntropyRecorder` records while generating, for a rollout whose engine recorded none."""
    logits = model(input_ids=seq, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                   use_cache=False).logits
    return token_entropy(logits[:, :-1], temperature)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (nats) of softmax(logits / temperature) over the last dimension."""
    return torch.distributions.Categorical(logits=logits.float() / temperature).entropy()


@dataclass
class SamplingConfig:
    """Table 5: temperature 0.8, top-k 50, top-p 1.0 for Gemma (1.0 / 5 / 1.0 for CodeGemma)."""

    max_new_tokens: int = 64
    temperature: float = 0.8
    top_k: int = 50
    top_p: float = 1.0
    do_sample: bool = True


def decode_responses(tokenizer, seq: torch.Tensor, action_mask: torch.Tensor) -> list:
    """The response text of each row (special tokens dropped)."""
    tokens = seq[:, 1:]
    return [tokenizer.decode(row[mask.bool()], skip_special_tokens=True) for row, mask in zip(tokens, action_mask)]


def macro_view(tokenizer, seq_row: torch.Tensor, segment_row: torch.Tensor) -> str:
    """One response with its macro actions separated by `` @@ `` (for logged samples)."""
    tokens = seq_row[1:]
    pieces = []
    for macro in range(int(segment_row.max().item()) + 1):
        pieces.append(tokenizer.decode(tokens[segment_row == macro]))
    return " @@ ".join(pieces)
