"""``--env consistency``: the built-in multi-turn task, offline and learnable by a tiny model, whose reward comes
only at the end and depends on every turn, so its credit must travel back across turns.

Turn 1 asks for one character; each later turn asks the policy to repeat its first answer. A turn's answer is the
first non-space character of its reply. The episode's only reward, after the last turn, is 1 when the first
answer is a character and every later answer equals it, else 0: the first turn earns nothing by itself, yet what
it says decides whether the last can earn anything.
"""
from __future__ import annotations

from typing import List, Tuple

from .base import StepResult, TextEnvironment
from .registry import register_environment

TURNS = 2
"""Policy turns per episode."""
TASKS = {"train": 256, "eval": 32}
"""Tasks per split: the same game, numbered (the number is part of the prompt, so prompts differ)."""


def answer(reply: str) -> str:
    """A reply's answer: its first non-space character ('' for a blank reply)."""
    stripped = reply.strip()
    return stripped[:1]


def consistent(answers: List[str]) -> bool:
    """Whether the first answer is a character and every later answer repeats it."""
    return bool(answers[0]) and all(later == answers[0] for later in answers[1:])


@register_environment("consistency")
class ConsistencyEnvironment(TextEnvironment):
    """State: the answers so far."""

    def tasks(self, split: str) -> List[str]:
        return [f"Game {index}." for index in range(TASKS[split])]

    def reset(self, task: str) -> Tuple[str, dict]:
        self.answers: List[str] = []
        return f"{task} Say one character.", {}

    def step(self, action: str) -> StepResult:
        self.answers.append(answer(action))
        if len(self.answers) < TURNS:
            return StepResult("Say your first character again.", 0.0, False, False, {"answer": self.answers[-1]})
        return StepResult("", float(consistent(self.answers)), True, False, {"answer": self.answers[-1]})
