"""Reasoning-step termination: a macro action is one step of a reasoning chain (beyond the paper; its §3.2.1
asks for termination rules that follow the response's structure, and a chain of thought's structure is its steps).

A step ends at the step delimiter (``--step_delimiter``, a newline by default: one step a line, as worked
solutions of GSM8K, MATH and the embedded ``arithmetic`` task are written). On a decoded response:

1. the token holding the last character of each occurrence of the delimiter ends a step (a delimiter split over
   several tokens ends with the token that completes it; a token holding several delimiters ends one step);
2. a step shorter than ``--step_min_tokens`` tokens is not cut off: it runs on into the next step (a blank line or
   a short header joins the step it introduces), and a short last step joins the one before it.

Tokens are placed in the text as the parsing rule places them (:mod:`..parsers.alignment`: incremental
detokenisation, verified). A response that cannot be aligned falls back to token-level macros
(``fallback[b] = True``, as the parsing rule, paper §B.4); a response without a delimiter is one macro.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

from ..parsers.alignment import char_spans, text_decoder, token_pieces
from ..segments import as_action_mask, check_same_shape, segments_from_lengths
from .base import Segmentation, SegmentationBatch, TerminationRule
from .options import TerminationOptions
from .registry import register_termination


def check_step_options(delimiter: str, min_tokens: int) -> None:
    if not delimiter:
        raise ValueError("step_delimiter must be a non-empty string")
    if min_tokens < 1:
        raise ValueError(f"step_min_tokens must be >= 1, got {min_tokens}")


def step_end_tokens(pieces: Sequence[str], delimiter: str) -> List[int]:
    """Rule 1: the sorted indices of the tokens that end a step (each holds the last character of a delimiter)."""
    text = "".join(pieces)
    ends, start = [], text.find(delimiter)
    while start >= 0:
        ends.append(start + len(delimiter) - 1)
        start = text.find(delimiter, start + len(delimiter))
    spans, tokens, token = char_spans(pieces), [], 0
    for end in ends:
        while spans[token][1] <= end:
            token += 1
        if not tokens or tokens[-1] != token:
            tokens.append(token)
    return tokens


def step_macro_lengths(pieces: Sequence[str], delimiter: str, min_tokens: int) -> List[int]:
    """Macro lengths (summing to ``len(pieces)``) of one response: rule 1's steps, rule 2's merges."""
    lengths, current = [], 0
    boundaries = set(step_end_tokens(pieces, delimiter))
    for token in range(len(pieces)):
        current += 1
        if token in boundaries and current >= min_tokens and token < len(pieces) - 1:
            lengths.append(current)
            current = 0
    if current:
        if current < min_tokens and lengths:
            lengths[-1] += current
        else:
            lengths.append(current)
    return lengths


def step_segments(response_token_ids: torch.Tensor, action_mask: torch.Tensor, tokenizer, delimiter: str = "\n",
                  min_tokens: int = 1) -> Segmentation:
    """Step segmentation of a batch (module docstring): ``segment_ids [B, T]`` (-1 off the response) and
    ``fallback [B]``. Any padding side."""
    check_step_options(delimiter, min_tokens)
    on = as_action_mask(action_mask)
    check_same_shape("response_token_ids", response_token_ids, on, "action_mask")
    decode = text_decoder(tokenizer)
    on_cpu, ids_cpu = on.cpu(), response_token_ids.cpu()
    lengths, fallback = [], []
    for row in range(on.shape[0]):
        ids = ids_cpu[row][on_cpu[row]].tolist()
        aligned = token_pieces(ids, decode)
        fallback.append(aligned is None)
        lengths.append([1] * len(ids) if aligned is None else step_macro_lengths(aligned[1], delimiter, min_tokens))
    return Segmentation(segment_ids=segments_from_lengths(on, lengths),
                        fallback=torch.tensor(fallback, dtype=torch.bool, device=on.device))


@register_termination("step")
def build_step(options: TerminationOptions) -> TerminationRule:
    """The step rule with ``options.step_delimiter`` and ``options.step_min_tokens``."""
    check_step_options(options.step_delimiter, options.step_min_tokens)

    def rule(batch: SegmentationBatch) -> Segmentation:
        if batch.response_token_ids is None or batch.tokenizer is None:
            raise ValueError("the step termination needs response_token_ids and tokenizer in SegmentationBatch")
        return step_segments(batch.response_token_ids, batch.action_mask, batch.tokenizer, options.step_delimiter,
                             options.step_min_tokens)

    return rule
