"""The B.5 reward, code extraction, and the batch scoring the PPO trainer calls."""
from __future__ import annotations

import pytest

from conftest import apps_rows, apps_task
from dschat.rewards import (
    ExecutionResult,
    ProgramOutcome,
    SandboxLimits,
    TestOutcome,
    code_reward,
    extract_code,
    score_completions,
)

P, F, E, T, S = (TestOutcome.PASSED, TestOutcome.FAILED, TestOutcome.RUNTIME_ERROR, TestOutcome.TIMEOUT,
                 TestOutcome.SKIPPED)


def apps_tasks() -> dict:
    """The fixture tasks, without 4006 (bad JSON: the adapter skips it; tested in test_code_execution)."""
    return {problem_id: apps_task(row) for problem_id, row in apps_rows().items() if problem_id != 4006}


@pytest.mark.parametrize("completion, code", [
    ("Sure:\n```python\nprint(1)\n```\nDone.", "print(1)\n"),
    ("```py\nx = 1\n```", "x = 1\n"),
    ("```\nprint(2)\n```", "print(2)\n"),
    ("```bash\nls\n```\n```python\nprint(3)\n```", "print(3)\n"),
    ("```\nplain\n```\n```python\ntagged\n```", "tagged\n"),
    ("```python\nprint(4)\n", "print(4)\n"),  # unterminated: to the end
    ("```python\nprint(5)\n```<|endoftext|>```python\nprint(6)\n```", "print(5)\n"),
    ("    return x + 1\n<eos>junk", "    return x + 1\n"),  # continuation keeps its indentation
    ("    return x\n<|endoftext|>", "    return x\n"),
    ("print(7)</s>", "print(7)"),
    ("  ```python\n  indented fence\n  ```", "  indented fence\n"),
    ("no code here", "no code here"),
])
def test_extract_code(completion, code):
    assert extract_code(completion) == code


def result(outcome: ProgramOutcome, *tests: TestOutcome) -> ExecutionResult:
    return ExecutionResult("t", outcome, tuple(tests))


@pytest.mark.parametrize("execution, reward", [
    (result(ProgramOutcome.COMPILE_ERROR, S, S), -1.0),
    (result(ProgramOutcome.RUNTIME_ERROR, P, E, S), -0.6),
    (result(ProgramOutcome.TIMEOUT, P, T, P), -0.6),
    (result(ProgramOutcome.PASSED, P, P, P), 1.0),
    (result(ProgramOutcome.FAILED, F, F), -0.3),
    (result(ProgramOutcome.FAILED, P, F, P), -0.3 + 1.3 * 2 / 3),
])
def test_code_reward_follows_appendix_b5(execution, reward):
    assert code_reward(execution) == pytest.approx(reward)


def test_code_reward_refuses_what_it_cannot_score():
    with pytest.raises(ValueError, match="malformed"):
        code_reward(ExecutionResult("t", ProgramOutcome.MALFORMED_TASK, detail="task t: no test cases"))
    with pytest.raises(ValueError, match="skipped"):
        code_reward(result(ProgramOutcome.FAILED, F, S, S))


def test_score_completions_on_a_mixed_batch():
    tasks = apps_tasks()
    batch = [
        (tasks[4001], "```python\nt = int(input())\nfor _ in range(t):\n    a, b = map(int, input().split())\n"
                      "    print(a + b)\n```"),
        (tasks[4001], "input()\na, b = map(int, input().split())\nprint(a + b)\n"),  # right on test 1 only
        (tasks[4003], "def min_max(lst):\n    return min(lst), max(lst)\n<|endoftext|>"),
        (tasks[4003], "def min_max(lst:\n    return 0\n"),
        (tasks[4005], "def average(numbers):\n    return sum(numbers) / len(numbers) / 0\n"),
        (tasks[4002], "while True:\n    pass\n"),
        (tasks[4007], "print(input())\n"),  # inputs/outputs length mismatch
    ]
    rewards, counts = score_completions([completion for _, completion in batch], [task for task, _ in batch],
                                        SandboxLimits(test_timeout_s=1.0), max_workers=2, malformed_reward=0.0)
    assert rewards == pytest.approx([1.0, -0.3 + 1.3 / 3, 1.0, -1.0, -0.6, -0.6, 0.0])
    assert counts == {"passed": 2, "failed": 1, "runtime_error": 1, "timeout": 1, "compile_error": 1,
                      "malformed_task": 1, "sandbox_error": 0}
