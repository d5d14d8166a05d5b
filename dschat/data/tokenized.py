"""Tokenised torch datasets for the three stages.

Every sequence is ``[bos] + prompt + response + [eos]``:

* ``bos`` is prepended when the tokenizer has a ``bos_token`` (Gemma, Llama and the shipped synthetic
  tokenizer do; GPT-2 style tokenizers do not); ``eos`` is appended after every response (SFT and RM),
  never after a PPO prompt. Text is encoded with ``add_special_tokens=False`` so nothing is added twice.
* prompt and response are encoded together (``prompt + response``), not separately, so tokens are those the
  model sees at generation; the prompt part is the longest common prefix of ``encode(prompt)`` and
  ``encode(prompt + response)`` (a token merging across the boundary counts as response).
* the tokenizer saved with a model says the same (:func:`with_sequence_layout`): a plain call
  ``tokenizer(text)`` of a saved policy gives ``[bos] + text`` (a generation prompt, never eos), of a saved
  reward model or critic ``[bos] + text + [eos]`` (the sequence it was trained to score, at the eos), and their
  chat template renders messages as that same layout, so other tools (``transformers``, TRL) see our sequences.
* an example longer than its token budget is skipped, counted (``num_skipped``, ``skips.counts``) and logged
  once, never truncated. A text with more characters than the budget's tokens could ever cover
  (:func:`character_limit`) is skipped without being tokenised, so one enormous row (a 10 MB line) costs no
  more memory than reading it.

Items (lists of ids become 1-D ``torch.long`` tensors):

* :class:`SFTDataset`: ``input_ids``, ``attention_mask``, ``labels`` (``-100`` on bos and prompt tokens:
  the loss covers response tokens and eos only);
* :class:`PairDataset`: ``chosen_input_ids``, ``rejected_input_ids`` (a pair without ``rejected`` is a
  DataError naming its file and row),
  and ``chosen_prompt_length``, ``rejected_prompt_length`` (0-dim: how many leading ids, bos included, are the
  prompt's, so that DPO can sum log-probs over the response and eos only);
* :class:`PromptDataset`: ``input_ids`` (bos + prompt) and ``index``, the prompt's position in the list the
  dataset was built from (to find its CodeTask or reference text after skips).

Batch them with the collators of :mod:`dschat.data.collators`.
"""
from __future__ import annotations

import copy
import logging
from typing import Dict, List, Sequence, Tuple

import torch
from torch.utils.data import Dataset

from .errors import DataError, SkipCounter
from .schema import PreferencePair

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


def special_token_ids(tokenizer) -> Tuple[List[int], int]:
    """(``[bos_id]`` or ``[]``, ``eos_id``); a DataError when the tokenizer has no eos token."""
    if tokenizer.eos_token_id is None:
        raise DataError(f"tokenizer {type(tokenizer).__name__} has no eos_token; set one before tokenising")
    prefix = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    return prefix, tokenizer.eos_token_id


LAYOUT_CHAT_TEMPLATE = (
    "{{ bos_token or '' }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
    "{% if messages[-1]['role'] == 'assistant' and not add_generation_prompt %}{{ eos_token }}{% endif %}")
"""Messages as this module's layout: ``[bos]``, the contents concatenated (roles carry no text: the datasets
are plain prompt + response strings), and ``[eos]`` after a final assistant message (a scored sequence; none
after a generation prompt)."""


def with_sequence_layout(tokenizer, eos: bool):
    """A copy of fast ``tokenizer`` whose plain call adds this module's special tokens: ``[bos] + text`` and,
    with ``eos``, ``+ [eos]`` (a ``TemplateProcessing`` post-processor, saved in ``tokenizer.json``), and whose
    chat template is :data:`LAYOUT_CHAT_TEMPLATE`, replacing the base model's own: a checkpoint trained on this
    layout must be rendered as this layout by chat tools. (SmolLM2-Instruct's ChatML template adds a system
    turn, role headers and a ``\n`` after the final ``<|im_end|>``; TRL's ``GRPOTrainer`` renders a reward model's
    conversational input with that template, so a reward model saved with it was read at a token it was never
    scored at and agreed with our ranking on 59% of pairs.)"""
    special_token_ids(tokenizer)  # the same checks as the datasets
    if not getattr(tokenizer, "is_fast", False):
        raise DataError(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; cannot set its special tokens")
    layout = copy.deepcopy(tokenizer)
    layout.add_bos_token = tokenizer.bos_token_id is not None
    layout.add_eos_token = eos
    layout.chat_template = LAYOUT_CHAT_TEMPLATE
    return layout


CHARACTER_MARGIN = 2
"""Safety factor of :func:`character_limit` (a normalizer composing character pairs, e.g. NFKC, can shorten a
text before it is tokenised)."""


def character_limit(tokenizer, max_tokens: int) -> int:
    """Characters beyond which a text surely has more than ``max_tokens`` tokens: one token stands for at most
    as many characters as its longest vocabulary entry has (byte-level BPE: one character per byte;
    SentencePiece: ``▁`` per space, byte fallbacks ``<0xNN>`` longer than the byte they stand for), times
    :data:`CHARACTER_MARGIN`. (A tokenizer that drops characters -- a word-level one splitting on whitespace --
    can fit long runs of them; the margin covers ordinary spacing.)"""
    return CHARACTER_MARGIN * max_tokens * max(map(len, tokenizer.get_vocab()))


def encode_texts(tokenizer, texts: Sequence[str]) -> List[List[int]]:
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    for a, b in zip(first, second):
        if a != b:
            break
        length += 1
    return length


def encode_prompt_response(tokenizer, prompts: Sequence[str], responses: Sequence[str]) -> List[Tuple[List[int], int]]:
    """For each pair: the ids of ``prompt + response`` and how many leading ids are the prompt's."""
    prompt_ids = encode_texts(tokenizer, prompts)
    full_ids = encode_texts(tokenizer, [prompt + response for prompt, response in zip(prompts, responses)])
    return [(full, common_prefix_length(prompt, full)) for prompt, full in zip(prompt_ids, full_ids)]


def as_tensor(ids: Sequence[int]) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.long)


class TokenizedDataset(Dataset):
    """What the three datasets share: the kept ``examples`` and the ``skips`` counted while building them."""

    examples: list
    skips: SkipCounter

    @property
    def num_skipped(self) -> int:
        return self.skips.total

    def __len__(self) -> int:
        return len(self.examples)


class SFTDataset(TokenizedDataset):
    """Prompt + chosen response; labels mask bos, prompt (and, in the collator, padding) with -100."""

    def __init__(self, pairs: Sequence[PreferencePair], tokenizer, max_seq_len: int):
        prefix, eos = special_token_ids(tokenizer)
        self.skips = SkipCounter(f"SFT examples (max_seq_len={max_seq_len})")
        self.examples: List[Tuple[List[int], List[int]]] = []
        limit, fitting = character_limit(tokenizer, max_seq_len), []
        for position, pair in enumerate(pairs):
            characters = len(pair.prompt) + len(pair.chosen)
            if characters > limit:
                self.skips.skip(f"longer than max_seq_len={max_seq_len}", f"pair {position} ({characters} characters)")
            else:
                fitting.append(position)
        encoded = encode_prompt_response(tokenizer, [pairs[i].prompt for i in fitting],
                                         [pairs[i].chosen for i in fitting])
        for position, (ids, prompt_length) in zip(fitting, encoded):
            input_ids = prefix + ids + [eos]
            if len(input_ids) > max_seq_len:
                self.skips.skip(f"longer than max_seq_len={max_seq_len}", f"pair {position} ({len(input_ids)} tokens)")
                continue
            masked = len(prefix) + prompt_length
            self.examples.append((input_ids, [IGNORE_INDEX] * masked + input_ids[masked:]))
        self.skips.log_summary(logger, len(pairs))

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        input_ids, labels = self.examples[index]
        return {"input_ids": as_tensor(input_ids), "attention_mask": torch.ones(len(input_ids), dtype=torch.long),
                "labels": as_tensor(labels)}


class PairDataset(TokenizedDataset):
    """Reward-model pairs: ``[bos] + prompt + chosen + [eos]`` and the same with ``rejected``."""

    def __init__(self, pairs: Sequence[PreferencePair], tokenizer, max_seq_len: int):
        prefix, eos = special_token_ids(tokenizer)
        self.skips = SkipCounter(f"reward-model pairs (max_seq_len={max_seq_len})")
        limit, complete = character_limit(tokenizer, max_seq_len), []
        for position, pair in enumerate(pairs):
            if pair.rejected is None:
                raise DataError(f"{pair.origin or f'pair {position + 1}'}: no 'rejected' response (the reward model "
                                "and DPO train on pairs: each row needs \"rejected\")")
            characters = len(pair.prompt) + max(len(pair.chosen), len(pair.rejected))
            if characters > limit:
                self.skips.skip(f"longer than max_seq_len={max_seq_len}", f"pair {position} ({characters} characters)")
            else:
                complete.append((position, pair))
        prompts = [pair.prompt for _, pair in complete]
        chosen = encode_prompt_response(tokenizer, prompts, [pair.chosen for _, pair in complete])
        rejected = encode_prompt_response(tokenizer, prompts, [pair.rejected for _, pair in complete])
        self.examples: List[Tuple[List[int], List[int]]] = []
        self.prompt_lengths: List[Tuple[int, int]] = []
        for (position, _), (chosen_ids, chosen_prompt), (rejected_ids, rejected_prompt) in zip(complete, chosen,
                                                                                              rejected):
            chosen_ids, rejected_ids = prefix + chosen_ids + [eos], prefix + rejected_ids + [eos]
            longest = max(len(chosen_ids), len(rejected_ids))
            if longest > max_seq_len:
                self.skips.skip(f"longer than max_seq_len={max_seq_len}", f"pair {position} ({longest} tokens)")
                continue
            self.examples.append((chosen_ids, rejected_ids))
            self.prompt_lengths.append((len(prefix) + chosen_prompt, len(prefix) + rejected_prompt))
        self.skips.log_summary(logger, len(pairs))

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        chosen_ids, rejected_ids = self.examples[index]
        chosen_prompt, rejected_prompt = self.prompt_lengths[index]
        return {"chosen_input_ids": as_tensor(chosen_ids), "rejected_input_ids": as_tensor(rejected_ids),
                "chosen_prompt_length": torch.tensor(chosen_prompt, dtype=torch.long),
                "rejected_prompt_length": torch.tensor(rejected_prompt, dtype=torch.long)}


class PromptDataset(TokenizedDataset):
    """PPO queries: ``[bos] + prompt`` (no eos) and the prompt's position in ``prompts``."""

    def __init__(self, prompts: Sequence[str], tokenizer, max_prompt_len: int):
        prefix, _ = special_token_ids(tokenizer)
        self.skips = SkipCounter(f"PPO prompts (max_prompt_len={max_prompt_len})")
        self.examples: List[Tuple[List[int], int]] = []
        limit, fitting = character_limit(tokenizer, max_prompt_len), []
        for position, prompt in enumerate(prompts):
            if len(prompt) > limit:
                self.skips.skip(f"longer than max_prompt_len={max_prompt_len}",
                                f"prompt {position} ({len(prompt)} characters)")
            else:
                fitting.append(position)
        for position, ids in zip(fitting, encode_texts(tokenizer, [prompts[i] for i in fitting])):
            input_ids = prefix + ids
            if len(input_ids) > max_prompt_len:
                self.skips.skip(f"longer than max_prompt_len={max_prompt_len}",
                                f"prompt {position} ({len(input_ids)} tokens)")
                continue
            self.examples.append((input_ids, position))
        self.skips.log_summary(logger, len(prompts))

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        input_ids, position = self.examples[index]
        return {"input_ids": as_tensor(input_ids), "index": torch.tensor(position, dtype=torch.long)}
