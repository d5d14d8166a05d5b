"""The embedded reasoning task (``--data_name arithmetic``): multi-step arithmetic mod 10 with an exact answer.

Why. Reinforcement learning on language models today is mostly reasoning with a *verifiable* reward (an exact
answer check, no reward model), and the paper's reviewer QYzk asked whether macro actions would hurt it. A
reasoning chain has a natural macro action, its step; this task gives the project one, offline and in CI.

Task (fourth version). A prompt gives a one-digit start value and a program of :data:`PROGRAM_OPS` labelled
operations, to be run :data:`ROUNDS` times in order, mod :data:`MODULUS`; each operation is written as the step
it asks for, with ``?`` for the values to fill in::

    Start 2, mod 10, 3 rounds:
    a:?+4=?
    b:?+1=?
    c:?*3=?

The worked solution fills them in, one step a line (9 steps), then the answer line::

     a:2+4=6
    b:6+1=7
    c:7*3=1
    a:1+4=5
    ...
    c:3*3=9
    Answer: 9

(one leading space, as every response of the project). The shipped tokenizer writes every character of a line as
one token: 8 tokens a step, 80 a response, 44 a prompt. Operations: ``+ b`` with ``b`` in 1..9 and ``* b`` with
``b`` in :data:`FACTORS`, drawn uniformly from those 12 (10 × 12³ = 17,280 distinct problems); every value is one
digit. Why this form: a from-scratch 4-layer model (``tiny-gemma``) has to learn three things from the SFT data
alone, and each is made as plain as it can be while the chain stays long: (a) *looking the operation up*: a
step's operation is the one 3 lines up, in the prompt for the first round and in the solution for the others, and
every line has 8 tokens, so the operation and operand are always 24 tokens back (one relative offset, for every
step of every problem; the label repeats with them); (b) *the arithmetic*: 120 one-digit facts (90 sums, 30
products mod 10); (c) *the value carried*: the previous line's result, 4 tokens back (the start value for the
first step). Measured (``docs/reasoning.md``): see the page for where the SFT model lands.

Earlier versions, each measured on the SFT model of the plan's flags (4 epochs of the 4,000 SFT problems, batch
16, lr 2e-3) and each failing the design: (1) the operations on one line, ``Compute left to right: 27 + 8 + 2 * 2
...``, operands up to 49, ``* 3``, values up to 199, 5-6 steps: 0 of 64 held-out problems; (2) the same line with
operands 1-9, ``* 2``, values up to 99, 6-7 steps: 3% of 200, every right answer through wrong steps; (3) one
labelled operation a line (``a: + 8``, solution ``a: 27 + 8 = 35``), 5-6 steps, values up to 99: 6% of 200, every
right answer through wrong steps, the first step already wrong in 51 of 60 greedy chains. Versions 2 and 3 wrote
chains of the right form without reading the operands: two-digit values whose digit count varies put a step's
operand at a different distance in every problem, which 1,000 SFT steps did not teach the tiny model to find.
A pilot of this version's first form (8 different operations, one a line, ``Start 2, mod 10.`` then ``a:?+4=?``
... ``h:?*9=?``, each looked up 80 tokens back in the prompt; 300 SFT steps of batch 16 on fresh problems, lr
2e-3) still got 0.75% of the steps of 50 greedy chains right (16% of the answers, all by chance; at lr 6e-3 it
learnt less); the same pilot of this form (the program run in rounds) got the operations copied and 6% of the
steps right, its loss still falling (``docs/reasoning.md``).

Credit assignment. The reward (:func:`dschat.rewards.verify_answer`) looks at the answer line only, about 60
tokens after the first decision that can ruin it. Each operation is a bijection of the values mod 10 (adding
any ``b``; multiplying by 3, 7 or 9, which are prime to 10), so a single wrong step always makes the answer wrong
(the error is carried to the end, never cancelled); only two or more compensating errors can land on the right
answer. The price of one-digit values: an answer guessed at random is right one time in ten, so right answers
are not evidence of right steps by themselves. :func:`chain_errors` finds the steps of a response that do not
follow from the prompt, so a right answer reached through a wrong step (right for the wrong reasons) is counted,
not assumed away (``evaluation/reasoning.py`` reports it).

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

SPLIT_SIZES = {"train": 16000, "validation": 400}
SPLIT_SEEDS = {"train": 21, "validation": 22}
PROGRAM_OPS, ROUNDS = 3, 3
"""A program of 3 operations, run 3 times: 9 steps."""
MODULUS = 10
ADDENDS = tuple(range(1, MODULUS))
FACTORS = (3, 7, 9)
"""The factors prime to 10 (other than 1): multiplying by one is a bijection of the values mod 10."""
LABELS = "abc"
"""Each operation's label, in the prompt and in each step that applies it."""
ANSWER_PREFIX = "Answer:"
OPERATIONS = {"+": lambda a, b: (a + b) % MODULUS, "*": lambda a, b: (a * b) % MODULUS}
STEP = re.compile(r"^\s*(?:[a-z]:)?\s*(-?\d+)\s*([-+*])\s*(\d+)\s*=\s*(-?\d+)\s*$")
ANSWER_LINE = re.compile(rf"^\s*{ANSWER_PREFIX}\s*(-?\d+)\s*$")
START = re.compile(r"Start (\d+), mod 10, (\d+) rounds:")
OPERATION = re.compile(r"^[a-z]:\?([-+*])(\d+)=\?$", re.M)


@dataclass(frozen=True)
class Problem:
    """A start value and a program of ``(operator, operand)`` operations, applied in order ``rounds`` times, mod 10."""

    start: int
    program: Tuple[Tuple[str, int], ...]
    rounds: int = ROUNDS

    @property
    def operations(self) -> Tuple[Tuple[str, int], ...]:
        """Every step's operation, in order: the program, ``rounds`` times."""
        return self.program * self.rounds

    @property
    def prompt(self) -> str:
        lines = [f"{label}:?{op}{operand}=?" for label, (op, operand) in zip(LABELS, self.program)]
        return "\n".join([f"Start {self.start}, mod 10, {self.rounds} rounds:"] + lines + [""])

    def values(self) -> List[int]:
        """The chain's values: the start, then the value after each step (the last is the answer)."""
        values = [self.start]
        for op, operand in self.operations:
            values.append(OPERATIONS[op](values[-1], operand))
        return values

    @property
    def answer(self) -> int:
        return self.values()[-1]

    def solution(self) -> str:
        """The worked solution: one ``label:a op b=c`` line a step, then ``Answer: c``; one leading space."""
        values, labels = self.values(), LABELS[:len(self.program)] * self.rounds
        steps = [f"{label}:{a}{op}{b}={c}"
                 for label, a, (op, b), c in zip(labels, values, self.operations, values[1:])]
        return " " + "\n".join(steps + [f"{ANSWER_PREFIX} {values[-1]}"])


CHOICES = tuple(("+", b) for b in ADDENDS) + tuple(("*", k) for k in FACTORS)
"""The 12 operations a program's step is drawn from, uniformly."""


def generate_problem(rng: random.Random) -> Problem:
    start = rng.randrange(MODULUS)
    return Problem(start, tuple(rng.choice(CHOICES) for _ in range(PROGRAM_OPS)))


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
    program = tuple((op, int(b)) for op, b in OPERATION.findall(prompt))
    return Problem(int(start.group(1)), program, int(start.group(2)))


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
