"""Reading a judge's free-text answer (paper Appendix F.1's three answer styles) or its first token's
log-probabilities as a verdict letter: 'A' (the response shown first), 'B' (shown second), 'E' (a tie), or None
when the answer names none or both."""
from __future__ import annotations

import ast
import json
import math
import re
from collections import defaultdict
from typing import Dict, Optional, Sequence, Tuple

from evaluation.judge_prompts import JSON_CHOICE, JSON_CRITERIA, SINGLE_CHAR, JudgeTask

LETTERS = ("A", "B", "E")

_STRIP_CHARS = " \t\r\n'\"`*_.:;,!?()[]{}<>"
_TIE_WORDS = {"tie", "equal", "equally good", "equally bad", "both", "same", "neither", "draw"}
_LEADING_LETTER = re.compile(r"^[\s'\"`*_(\[]*([ABE])(?:$|[ \t]*(?:\r?\n|[()\[\].:;,!'\"`*_\-])|\s+(?i:is|wins|because|since)\b)")
_NAMED_LETTER = re.compile(r"(?i:\b(?:summary|response|answer|option|choice|assistant)\s*[:#\-]?\s*\(?['\"]?)([ABEabe])\b")
_BETTER_LETTER = re.compile(r"\b([ABE])['\"]?\s+(?i:is\s+(?:the\s+)?(?:better|more|preferred|superior))")
_CODE_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def parse_letter(text: str) -> Optional[str]:
    """The verdict letter 'A', 'B' or 'E' in a short answer, or None when it names none or both.

    Accepts "A", "a", "'B'.", "**E**", "B - it is concise", "Response A", "Summary B is better", "tie"."""
    text = str(text)
    cleaned = text.strip(_STRIP_CHARS)
    if cleaned.upper() in LETTERS:
        return cleaned.upper()
    if cleaned.lower() in _TIE_WORDS:
        return "E"
    leading = _LEADING_LETTER.match(text)
    if leading:
        return leading.group(1)
    for pattern in (_NAMED_LETTER, _BETTER_LETTER):
        named = {letter.upper() for letter in pattern.findall(text)}
        if len(named) == 1:
            return named.pop()
    return None


def extract_json_object(text: str) -> Optional[dict]:
    """The first JSON object in ``text`` (inside a ```json code fence or between the outer braces); Python-style
    single quotes are accepted. None when there is none."""
    fenced = _CODE_FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        return None
    candidate = body[start:end + 1]
    for load in (json.loads, ast.literal_eval):
        try:
            value = load(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _normalise_key(key) -> str:
    return re.sub(r"[^a-z]+", " ", str(key).lower()).strip()


def _choice_value(value) -> Optional[str]:
    """A criterion's value: a letter string, or a nested object with a choice-like key."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if _normalise_key(key) in ("choice", "answer", "value", "verdict", "winner"):
                return parse_letter(inner)
        return None
    return parse_letter(value)


def parse_single_char(text: str) -> Dict[str, Optional[str]]:
    """TL;DR (Appendix F.1): a single character."""
    return {"overall": parse_letter(text)}


def parse_json_choice(text: str) -> Dict[str, Optional[str]]:
    """HH-RLHF (Appendix F.1): JSON with "comparison" and "choice"; without JSON, a "choice:" line or the last
    line (the prompt asks for the letter "on a new line")."""
    obj = extract_json_object(text)
    if obj is not None:
        for key, value in obj.items():
            if _normalise_key(key) == "choice":
                return {"helpfulness": _choice_value(value)}
    choice_line = re.search(r"(?i)\bchoice\b['\"]?\s*[:=]\s*(.+)", text)
    if choice_line:
        return {"helpfulness": parse_letter(choice_line.group(1).strip().rstrip("},"))}
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return {"helpfulness": parse_letter(lines[-1]) if lines else None}


def parse_json_criteria(text: str, criteria: Sequence[str]) -> Dict[str, Optional[str]]:
    """WebGPT (Appendix F.1): JSON mapping each criterion to a letter (keys matched by their first word, so
    "Factual accuracy", "factual_accuracy" and "FACTUAL ACCURACY" all count); without JSON, "criterion: X"
    lines. A criterion that is missing is None."""
    obj = extract_json_object(text)
    verdicts: Dict[str, Optional[str]] = {}
    for criterion in criteria:
        keyword = criterion.split()[0]
        verdict = None
        if obj is not None:
            for key, value in obj.items():
                if keyword in _normalise_key(key).split():
                    verdict = _choice_value(value)
                    break
        else:
            line = re.search(rf"(?im)^[\s*\-\"']*{keyword}[^:\n]*[:=]\s*(.+)$", text)
            verdict = parse_letter(line.group(1)) if line else None
        verdicts[criterion] = verdict
    return verdicts


def parse_answer(task: JudgeTask, text: str) -> Dict[str, Optional[str]]:
    """Criterion → presented letter ('A', 'B', 'E') or None (unparseable) for a free-text judge answer."""
    if task.style == SINGLE_CHAR:
        return parse_single_char(text)
    if task.style == JSON_CHOICE:
        return parse_json_choice(text)
    if task.style == JSON_CRITERIA:
        return parse_json_criteria(text, task.criteria)
    raise ValueError(f"unknown answer style {task.style!r}")


def letter_from_top_logprobs(top_logprobs: Sequence[Tuple[str, float]]) -> Optional[str]:
    """The most probable of A / B / E among the first token's top log-probabilities (probabilities of tokens
    that strip to the same letter, e.g. "A" and " A", are added); None when none of them is listed."""
    mass: Dict[str, float] = defaultdict(float)
    for token, logprob in top_logprobs:
        letter = token.strip()
        if letter in LETTERS:
            mass[letter] += math.exp(logprob)
    return max(mass, key=mass.get) if mass else None

