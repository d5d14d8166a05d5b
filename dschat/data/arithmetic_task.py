"""The embedded reasoning task (``--data_name arithmetic``): multi-step arithmetic with an exact answer.

Why. Reinforcement learning on language models today is mostly reasoning with a *verifiable* reward (an exact
answer check, no reward model), and the paper's reviewer QYzk asked whether macro actions would hurt it. A
reasoning chain has a natural macro action, its step; this task gives the project one, offline and in CI.

Task. A prompt gives a start value and :data:`MIN_OPS`-:data:`MAX_OPS` labelled operations to apply in order::

    Start with 27.
    a: + 8
    b: + 2
    c: * 2
    d: + 4
    e: - 1
    Solution:

The worked solution is a chain of short steps, one line each under its operation's label, then the answer line::

     a: 27 + 8 = 35
    b: 35 + 2 = 37
    c: 37 * 2 = 74
    d: 74 + 4 = 78
    e: 78 - 1 = 77
    Answer: 77

(one leading space, as every response of the project; about 14 tokens a step and 76-99 tokens a response with
the shipped tokenizer, which splits digits one by one). The label is the key a step finds its operation by: a
tiny model learns to copy after a matching label sooner than to count its way along one expression line.
Operations: ``+ b`` and ``- b`` with ``b`` in [:data:`MIN_ADD`, :data:`MAX_ADD`], and ``* k`` with ``k`` in
:data:`FACTORS`; every value of the chain stays in [0, :data:`MAX_VALUE`] (an operation that would leave it is
redrawn). Each step is a small sum, difference or
doubling, meant for a tiny model to learn well but not perfectly. Measured (``docs/reasoning.md``): after 4 epochs
of SFT on CPU the tiny model gets 6% of held-out problems right, every one through wrong steps: it has not yet
learnt to read the operands, so at that budget the task does not meet this design. (Earlier
versions wrote the operations on one line, ``Compute left to right: 27 + 8 + 2 * 2 ...``: with operands up to 49
and values up to 199 the tiny SFT model answered 0 of 64 held-out problems; with the numbers of this version 3% of
200, every one of them through wrong steps: it wrote chains of the right form but did not read the operands.)

Credit assignment. The reward (:func:`dschat.rewards.verify_answer`) looks at the answer line only, 60-90 tokens
after the first decision that can ruin it. Each operation is a bijection of the integers, so a single wrong step
always makes the answer wrong (the error is carried to the end, shifted or multiplied, never cancelled); only two
or more compensating errors can land on the right answer. :func:`chain_errors` finds the steps of a response that
do not follow from the prompt, so a right answer reached through a wrong step (right for the wrong reasons) is
counted, not assumed away (``evaluation/reasoning.py`` reports the rate).

Splits (generated on load, deterministic: ``random.Random`` of a fixed seed, whose stream Python keeps stable):
``train`` :data:`SPLIT_SIZES` problems from seed 21, ``validation`` from seed 22; a training problem whose prompt
is a validation prompt is dropped, so no held-out prompt is ever trained on. ``--data_path`` reads a JSONL file
in the canonical schema instead (:mod:`dschat.data.adapters.jsonl`).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from .schema import PreferencePair

SPLIT_SIZES = {"train": 8000, "validation": 400}
SPLIT_SEEDS = {"train": 21, "validation": 22}
MIN_OPS, MAX_OPS = 5, 6
MIN_START, MAX_START = 10, 99
MIN_ADD, MAX_ADD = 1, 9
FACTORS = (2,)
MAX_VALUE = 99
LABELS = "abcdef"
"""Each operation's label, in the prompt and in its step of the solution (the key a step's operands are found by)."""
ANSWER_PREFIX = "Answer:"
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
STEP = re.compile(r"^\s*(?:[a-z]: )?(-?\d+) ([-+*]) (\d+) = (-?\d+)\s*$")
ANSWER_LINE = re.compile(rf"^\s*{ANSWER_PREFIX}\s*(-?\d+)\s*$")
START = re.compile(r"Start with (\d+)\.")
OPERATION = re.compile(r"^[a-z]: ([-+*]) (\d+)$", re.M)


@dataclass(frozen=True)
class Problem:
    """A start value and the ``(operator, operand)`` operations applied to it from left to right."""

    start: int
    operations: Tuple[Tuple[str, int], ...]

    @property
    def prompt(self) -> str:
        lines = [f"{label}: {op} {operand}" for label, (op, operand) in zip(LABELS, self.operations)]
        return "\n".join([f"Start with {self.start}."] + lines + ["Solution:"])

    def values(self) -> List[int]:
        """The chain's values: the start, then the value after each operation (the last is the answer)."""
        values = [self.start]
        for op, operand in self.operations:
            values.append(OPERATIONS[op](values[-1], operand))
        return values

    @property
    def answer(self) -> int:
        return self.values()[-1]

    def solution(self) -> str:
        """The worked solution: one ``label: a op b = c`` line a step, then ``Answer: c``; one leading space."""
        values = self.values()
        steps = [f"{label}: {a} {op} {b} = {c}"
                 for label, a, (op, b), c in zip(LABELS, values, self.operations, values[1:])]
        return " " + "\n".join(steps + [f"{ANSWER_PREFIX} {values[-1]}"])


def _operation(rng: random.Random, value: int) -> Tuple[str, int]:
    """One operation keeping the value in [0, MAX_VALUE] (redrawn until it does)."""
    while True:
        op = rng.choice("+-*")
        operand = rng.choice(FACTORS) if op == "*" else rng.randint(MIN_ADD, MAX_ADD)
        if 0 <= OPERATIONS[op](value, operand) <= MAX_VALUE:
            return op, operand


def generate_problem(rng: random.Random) -> Problem:
    value = rng.randint(MIN_START, MAX_START)
    start, operations = value, []
    for _ in range(rng.randint(MIN_OPS, MAX_OPS)):
        operations.append(_operation(rng, value))
        value = OPERATIONS[operations[-1][0]](value, operations[-1][1])
    return Problem(start, tuple(operations))


def generate_problems(count: int, seed: int, exclude: Sequence[str] = ()) -> List[Problem]:
    """``count`` problems from ``random.Random(seed)`` whose prompts are distinct and not in ``exclude``."""
    rng, seen, problems = random.Random(seed), set(exclude), []
    while len(problems) < count:
        problem = generate_problem(rng)
        if problem.prompt not in seen:
            seen.add(problem.prompt)
            problems.append(problem)
    return problems


def split_problems(split: str) -> List[Problem]:
    """The problems of ``split`` (``train`` or ``validation``; the training ones avoid every validation prompt)."""
    validation = generate_problems(SPLIT_SIZES["validation"], SPLIT_SEEDS["validation"])
    if split == "validation":
        return validation
    return generate_problems(SPLIT_SIZES["train"], SPLIT_SEEDS["train"], [p.prompt for p in validation])


def arithmetic_pairs(split: str) -> List[PreferencePair]:
    """(prompt, worked solution) of every problem of ``split``: SFT pairs, PPO prompts and the verifier's
    references (no ``rejected``: the task has no reward model)."""
    return [PreferencePair(prompt=p.prompt, chosen=p.solution()) for p in split_problems(split)]


def problem_of_prompt(prompt: str) -> Optional[Problem]:
    """The problem a prompt of this task states, or None when it is not one."""
    start = START.search(prompt)
    if start is None:
        return None
    return Problem(int(start.group(1)), tuple((op, int(b)) for op, b in OPERATION.findall(prompt)))


def final_answer(response: str) -> Optional[int]:
    """The integer of the response's last ``Answer: N`` line, or None when it has none."""
    answers = [ANSWER_LINE.match(line) for line in response.splitlines()]
    answers = [match for match in answers if match]
    return int(answers[-1].group(1)) if answers else None


def chain_errors(response: str, problem: Problem) -> List[int]:
    """The 0-based steps of ``response`` that do not follow from the problem: a step whose line is not
    ``a op b = c`` (after its label, if any), whose ``a`` is not the previous value (the start for step 0), whose
    ``op b`` is not the problem's operation, or whose ``c`` is not ``a op b``; missing steps count as errors too."""
    lines = [line for line in response.splitlines() if line.strip() and not ANSWER_LINE.match(line)]
    errors, previous = [], problem.start
    for step, (op, operand) in enumerate(problem.operations):
        match = STEP.match(lines[step]) if step < len(lines) else None
        if match is None:
            errors.append(step)
            continue
        a, got_op, b, c = int(match.group(1)), match.group(2), int(match.group(3)), int(match.group(4))
        if (a, got_op, b) != (previous, op, operand) or c != OPERATIONS[op](a, b):
            errors.append(step)
        previous = c
    return errors
