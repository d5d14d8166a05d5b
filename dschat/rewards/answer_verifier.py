"""The answer verifier: a verifiable reward (1 for a right final answer, 0 otherwise; no reward model).

:func:`verify_answer` ``(response, reference, task)`` judges one response against the reference solution (or a
bare reference answer) of its problem:

* ``arithmetic`` (the embedded task, :mod:`dschat.data.arithmetic_task`): exact. The integer of the response's
  last ``Answer: N`` line must equal the reference's (its ``Answer:`` line, or the reference itself when it is a
  bare integer); no answer line is wrong.
* ``gsm8k`` and ``math``: Hugging Face's ``math-verify`` (pinned in ``requirements.txt``), as its README uses it:
  ``verify(parse(reference), parse(response))``, gold first. ``parse`` finds the final answer in free text
  (``\\boxed{...}``, an ``Answer:`` line, ``$...$``, a last expression) and ``verify`` compares the two
  symbolically, so ``1/2``, ``0.5`` and ``\\frac{1}{2}`` are one answer and ``$x = 3$`` matches ``3``, exactly as
  that library judges them. A response it cannot parse, or whose parse or comparison fails, is wrong.

:func:`answer_reward` adds the optional format term of DeepSeek-R1-style rewards (Guo et al., 2025, §2.2.2):
``r = 1[right] + w · 1[a final answer was found]``, ``w`` = ``--verifier_format_weight`` (default 0: the reward
is the 0/1 verdict, and its mean over held-out prompts is the accuracy).
"""
from __future__ import annotations

from typing import Optional

from dschat.data.arithmetic_task import final_answer

TASKS = ("arithmetic", "gsm8k", "math")


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"verify_answer: unknown task {task!r}; expected one of {', '.join(TASKS)}")


def reference_integer(reference: str) -> Optional[int]:
    """The reference answer of the embedded task: its ``Answer:`` line, or the text itself as an integer."""
    answer = final_answer(reference)
    if answer is not None:
        return answer
    try:
        return int(reference.strip())
    except ValueError:
        return None


def _math_parse(text: str) -> list:
    """math-verify's parse of ``text``; [] when it finds nothing or fails."""
    from math_verify import parse

    try:
        return parse(text)
    except Exception:  # the library's parse raises for malformed LaTeX and on its own timeouts
        return []


def has_answer(response: str, task: str) -> bool:
    """Whether the verifier finds a final answer in ``response`` (the format term's test)."""
    _check_task(task)
    if task == "arithmetic":
        return final_answer(response) is not None
    return bool(_math_parse(response))


def verify_answer(response: str, reference: str, task: str) -> bool:
    """Whether ``response``'s final answer is ``reference``'s (module docstring: exact for ``arithmetic``,
    math-verify for ``gsm8k`` / ``math``)."""
    _check_task(task)
    if task == "arithmetic":
        expected = reference_integer(reference)
        if expected is None:
            raise ValueError(f"verify_answer: the arithmetic reference {reference[-40:]!r} has no 'Answer: N' line")
        return final_answer(response) == expected
    from math_verify import verify

    gold, answer = _math_parse(reference), _math_parse(response)
    if not gold or not answer:
        return False
    try:
        return bool(verify(gold, answer))
    except Exception:  # a comparison the library cannot carry out (or times out on) is not a match
        return False


def answer_reward(response: str, reference: str, task: str, format_weight: float = 0.0) -> float:
    """``1[verify_answer] + format_weight · 1[has_answer]`` (module docstring)."""
    right = float(verify_answer(response, reference, task))
    return right + (format_weight * float(has_answer(response, task)) if format_weight else 0.0)
