"""Canonical records every dataset adapter produces.

Preference data (TL;DR, HH-RLHF, WebGPT, the embedded synthetic task, local JSONL) becomes
``PreferencePair``; program-synthesis data (APPS, HumanEval) becomes ``CodeTask``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class PreferencePair:
    """One comparison: the formatted prompt, the preferred response and (for RM data) the other one.

    ``prompt + chosen`` is the SFT text; ``(prompt, chosen, rejected)`` a reward-model pair; ``prompt`` alone a
    PPO query. Responses carry no end-of-sequence token: tokenisation appends the tokenizer's own.
    """

    prompt: str
    chosen: str
    rejected: Optional[str] = None
    origin: Optional[str] = field(default=None, compare=False, repr=False)
    """Where the row came from (``file, row N``), for an error about it later (a pair without ``rejected``)."""


@dataclass
class CodeTask:
    """One program-synthesis problem in a form both APPS and HumanEval fit.

    prompt: the formatted model prompt (question, starter code, answer format; Hendrycks et al., 2021).
    inputs / outputs: APPS ``input_output`` test cases (standard-input strings, or argument lists when
        ``fn_name`` is set: call-based style).
    test_code / entry_point: HumanEval's ``check(candidate)`` program and the function it checks.
    solutions: reference programs (APPS ``solutions``; HumanEval prompt + canonical solution).
    """

    task_id: str
    prompt: str
    question: str = ""
    starter_code: str = ""
    fn_name: Optional[str] = None
    inputs: List = field(default_factory=list)
    outputs: List = field(default_factory=list)
    test_code: Optional[str] = None
    entry_point: Optional[str] = None
    difficulty: str = "unknown"
    solutions: List[str] = field(default_factory=list)

    @property
    def has_tests(self) -> bool:
        """Whether a completion can be checked: APPS test cases, or a HumanEval test program."""
        return bool(self.inputs) or self.test_code is not None
