"""Collators: batch the items of :mod:`dschat.data.tokenized` into padded ``torch.long`` tensors.

=================  =========  ==================================================================
collator           padding    output keys (shapes)
=================  =========  ==================================================================
SFTCollator        right      input_ids, attention_mask, labels (B, L); labels -100 on padding
PairCollator       right      input_ids, attention_mask (2B, L): rows 0..B-1 are the chosen
                              sequences, rows B..2B-1 the rejected ones, row i and row B+i one pair
                              (the DeepSpeed-Chat layout: one forward pass scores both halves);
                              response_mask (2B, L): 1 on response tokens and eos, 0 on bos,
                              prompt and padding (what DPO sums log-probs over)
PromptCollator     LEFT       input_ids, attention_mask (B, P), index (B,): prompts end at the
                              right edge so generation continues every row from position P
=================  =========  ==================================================================

Padded positions hold ``pad_token_id`` and ``attention_mask`` 0. Build a collator from the tokenizer with
``SFTCollator.for_tokenizer(tokenizer)`` (a DataError when the tokenizer has no pad token; tokenizers
without one, such as Llama's, need ``tokenizer.pad_token = tokenizer.eos_token`` first).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import torch

from .errors import DataError
from .tokenized import IGNORE_INDEX

Batch = Dict[str, torch.Tensor]


def pad_token_id_of(tokenizer) -> int:
    if tokenizer.pad_token_id is None:
        raise DataError(f"tokenizer {type(tokenizer).__name__} has no pad_token; set one "
                        "(e.g. tokenizer.pad_token = tokenizer.eos_token) before building collators")
    return tokenizer.pad_token_id


def pad_right(sequences: Sequence[torch.Tensor], value: int) -> torch.Tensor:
    length = max(len(sequence) for sequence in sequences)
    batch = torch.full((len(sequences), length), value, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        batch[row, : len(sequence)] = sequence
    return batch


def pad_left(sequences: Sequence[torch.Tensor], value: int) -> torch.Tensor:
    length = max(len(sequence) for sequence in sequences)
    batch = torch.full((len(sequences), length), value, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        batch[row, length - len(sequence):] = sequence
    return batch


def ones_like_each(sequences: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    return [torch.ones_like(sequence) for sequence in sequences]


def response_ones(sequence: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """0 on the first ``prompt_length`` ids (bos and prompt), 1 on the rest (response and eos)."""
    mask = torch.ones_like(sequence)
    mask[:prompt_length] = 0
    return mask


@dataclass(frozen=True)
class SFTCollator:
    pad_token_id: int

    @classmethod
    def for_tokenizer(cls, tokenizer) -> "SFTCollator":
        return cls(pad_token_id_of(tokenizer))

    def __call__(self, items: Sequence[Batch]) -> Batch:
        input_ids = [item["input_ids"] for item in items]
        return {
            "input_ids": pad_right(input_ids, self.pad_token_id),
            "attention_mask": pad_right(ones_like_each(input_ids), 0),
            "labels": pad_right([item["labels"] for item in items], IGNORE_INDEX),
        }


@dataclass(frozen=True)
class PairCollator:
    pad_token_id: int

    @classmethod
    def for_tokenizer(cls, tokenizer) -> "PairCollator":
        return cls(pad_token_id_of(tokenizer))

    def __call__(self, items: Sequence[Batch]) -> Batch:
        sequences = [item["chosen_input_ids"] for item in items] + [item["rejected_input_ids"] for item in items]
        prompt_lengths = ([int(item["chosen_prompt_length"]) for item in items]
                          + [int(item["rejected_prompt_length"]) for item in items])
        return {
            "input_ids": pad_right(sequences, self.pad_token_id),
            "attention_mask": pad_right(ones_like_each(sequences), 0),
            "response_mask": pad_right([response_ones(sequence, prompt_length)
                                        for sequence, prompt_length in zip(sequences, prompt_lengths)], 0),
        }


@dataclass(frozen=True)
class PromptCollator:
    pad_token_id: int

    @classmethod
    def for_tokenizer(cls, tokenizer) -> "PromptCollator":
        return cls(pad_token_id_of(tokenizer))

    def __call__(self, items: Sequence[Batch]) -> Batch:
        input_ids = [item["input_ids"] for item in items]
        return {
            "input_ids": pad_left(input_ids, self.pad_token_id),
            "attention_mask": pad_left(ones_like_each(input_ids), 0),
            "index": torch.stack([item["index"] for item in items]),
        }
