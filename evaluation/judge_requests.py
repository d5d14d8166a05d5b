"""What is sent to the judge and how its verdict is read back: the F.1 prompt with a free answer (parsed), or one
single-character question per criterion whose first token is constrained to A / B / E (``logit_bias`` with
``max_tokens=1``) or read off the first token's ``top_logprobs`` -- either a single-character prompt alone, or
(``reason_first``) a follow-up in the conversation where the judge first answered the F.1 prompt freely."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from evaluation.judge_parse import LETTERS, letter_from_top_logprobs, parse_answer, parse_letter
from evaluation.judge_prompts import SINGLE_CHAR, JudgeTask, render, render_follow_up, render_single_char

CONSTRAIN_MODES = ("none", "logit_bias", "logprobs")


@dataclass(frozen=True)
class JudgeSettings:
    """What is sent to the judge. ``verdict_token_ids`` are the judge tokenizer's ids of A / B / E (needed by
    ``constrain="logit_bias"`` only). ``reason_first`` (with a constraint): the F.1 prompt is answered freely
    first, as in the paper, and each criterion's constrained verdict is asked after that answer."""

    model: str = "gpt-4o"
    temperature: float = 0.0
    max_tokens: int = 256
    constrain: str = "none"
    verdict_token_ids: Tuple[int, ...] = ()
    top_logprobs: int = 20
    logit_bias: float = 100.0
    reason_first: bool = False

    def __post_init__(self):
        if self.constrain not in CONSTRAIN_MODES:
            raise ValueError(f"--constrain {self.constrain}: choose one of {', '.join(CONSTRAIN_MODES)}")
        if self.constrain == "logit_bias" and not self.verdict_token_ids:
            raise ValueError("--constrain logit_bias needs the judge's A/B/E token ids "
                             "(--verdict_token_ids or --judge_tokenizer)")
        if self.reason_first and self.constrain == "none":
            raise ValueError("--reason_first reads a constrained verdict after the free answer: add --constrain "
                             "logit_bias or --constrain logprobs")


def user(content: str) -> dict:
    return {"role": "user", "content": content}


def chat_request(settings: JudgeSettings, messages: List[dict]) -> dict:
    """Keyword arguments of ``client.chat.completions.create`` for one judge conversation."""
    request = {"model": settings.model, "messages": messages,
               "temperature": settings.temperature, "max_tokens": settings.max_tokens}
    if settings.constrain == "logit_bias":
        request.update(max_tokens=1, logit_bias={str(i): settings.logit_bias for i in settings.verdict_token_ids})
    elif settings.constrain == "logprobs":
        request.update(max_tokens=1, logprobs=True, top_logprobs=settings.top_logprobs)
    return request


def reasoning_request(task: JudgeTask, settings: JudgeSettings, prompt: str, first: str, second: str
                      ) -> Optional[dict]:
    """The F.1 prompt with a free answer (the judge's comparison and reasons), sent before the verdicts when
    ``reason_first``; None otherwise, and for TL;DR, whose F.1 prompt itself asks for one character."""
    if not settings.reason_first or task.style == SINGLE_CHAR:
        return None
    free = replace(settings, constrain="none", reason_first=False)
    return chat_request(free, [user(render(task, prompt, first, second))])


def pair_requests(task: JudgeTask, settings: JudgeSettings, prompt: str, first: str, second: str,
                  reasoning: Optional[str] = None) -> List[Tuple[Tuple[str, ...], dict]]:
    """(criteria answered, request) for one presented pair: one F.1 request covering every criterion, or one
    constrained single-character request per criterion: after ``reasoning`` (the judge's free answer to the F.1
    prompt, from :func:`reasoning_request`) when given, else a single-character prompt alone."""
    if settings.constrain == "none":
        return [(task.criteria, chat_request(settings, [user(render(task, prompt, first, second))]))]
    if reasoning is not None:
        history = [user(render(task, prompt, first, second)), {"role": "assistant", "content": reasoning}]
        return [((criterion,), chat_request(settings, [*history, user(render_follow_up(criterion))]))
                for criterion in task.criteria]
    return [((criterion,), chat_request(settings, [user(render_single_char(task, criterion, prompt, first, second))]))
            for criterion in task.criteria]


def read_verdicts(task: JudgeTask, settings: JudgeSettings, criteria: Sequence[str], completion: Mapping
                  ) -> Dict[str, Optional[str]]:
    """Criterion → presented letter for one completion (``{"text", "top_logprobs", "model"}``).

    ``--constrain logprobs`` against a server that ignores ``logprobs`` (``transformers serve`` does) is an
    error, not a silent fall-back to the greedy first token."""
    if settings.constrain == "none":
        return parse_answer(task, completion["text"])
    if settings.constrain == "logprobs":
        if not completion.get("top_logprobs"):
            raise ValueError(f"--constrain logprobs: the judge {completion.get('model') or settings.model} returned "
                             "no top_logprobs (the server ignores 'logprobs'); use --constrain logit_bias")
        letter = letter_from_top_logprobs(completion["top_logprobs"])
    else:
        letter = parse_letter(completion["text"])
    return {criterion: letter for criterion in criteria}


def verdict_token_ids(encode: Callable[[str], List[int]]) -> Tuple[int, ...]:
    """Ids of "A", "B", "E" (and " A", " B", " E" where those are single tokens) under ``encode`` (text → ids,
    without special tokens)."""
    ids = []
    for text in (*LETTERS, *(" " + letter for letter in LETTERS)):
        encoded = encode(text)
        if len(encoded) == 1:
            ids.append(encoded[0])
    return tuple(ids)


def verdict_token_ids_from_tokenizer(name_or_path: str) -> Tuple[int, ...]:
    """:func:`verdict_token_ids` in the judge's tokenizer: a Hugging Face tokenizer (path or model name), or the
    ``.gguf`` file a llama.cpp server serves (its vocabulary read by transformers' GGUF loader)."""
    from transformers import AutoTokenizer

    from dschat.model.loading import resolve_model_path

    if name_or_path.endswith(".gguf"):
        if not os.path.isfile(name_or_path):
            raise ValueError(f"--judge_tokenizer {name_or_path}: no such file")
        tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(name_or_path)),
                                                  gguf_file=os.path.basename(name_or_path))
    else:
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path))
    return verdict_token_ids(lambda text: tokenizer.encode(text, add_special_tokens=False))
