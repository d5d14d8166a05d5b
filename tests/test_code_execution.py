"""APPS execution: comparison rules, hand-written ``codeparrot/apps`` fixtures in both styles, malformed tests,
stop policies, and verdicts that do not depend on which child process ran a test."""
from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict, deque

import numpy
import pytest

from conftest import apps_rows, apps_task
from dschat.rewards import (
    MalformedTaskError,
    ProgramOutcome,
    SandboxLimits,
    StopPolicy,
    TestOutcome,
    apps_test_cases,
    call_output_matches,
    execute_program,
    execute_programs,
    stdio_output_matches,
    validate_task,
)
from dschat.rewards.code_execution import apps_prelude
from dschat.rewards.sandbox import ProgramMode
from dschat.data.schema import CodeTask

LIMITS = SandboxLimits(test_timeout_s=1.0, memory_bytes=1 << 30)
P, F, E, T, S = (TestOutcome.PASSED, TestOutcome.FAILED, TestOutcome.RUNTIME_ERROR, TestOutcome.TIMEOUT,
                 TestOutcome.SKIPPED)


def stdio_task(inputs, outputs) -> CodeTask:
    return CodeTask(task_id="stdio", prompt="", inputs=list(inputs), outputs=list(outputs))


# ------------------------------------------------------------------------------------------- comparison rules

@pytest.mark.parametrize("actual, expected", [
    ("3\n7\n", "3\n7\n"), ("3\n7", "3\n7\n"), ("  3 \n7  \n\n", "3\n7\n"), ("1   2\t3\n", "1 2 3\n"),
    ("3\n\n7\n", "3\n7\n"), ("0.3333333333333333\n", "0.333333333333\n"), ("2.5\n", "2.5000000000\n"),
    ("1e-9\n", "0.000000001\n"), ("007\n", "7\n"), ("+7\n", "7\n"), ("-0\n", "0\n"), ("YES\n", "YES"),
    ("2\n", "2.0\n"), ("1 2\r\n3\r\n", "1 2\n3\n"), ("1 2 \n \n3 \n", "1 2\n3"), ("1\x0b2\n", "1\n2\n"),
    ("9" * 5000 + "\n", "0" + "9" * 5000), ("-1.5E+3\n", "-1500.0\n"),
])
def test_stdio_outputs_that_match(actual, expected):
    assert stdio_output_matches(actual, expected)


@pytest.mark.parametrize("actual, expected", [
    ("4\n", "3\n"), ("1 2\n", "2 1\n"), ("1 2\n3\n", "1\n2 3\n"), ("0.33\n", "0.333333333333\n"),
    ("12345678901234567890\n", "12345678901234567891\n"), ("yes\n", "YES\n"), ("3\n7\n8\n", "3\n7\n"),
    ("", "3\n"),
    # issue 31, class 1: a float-looking token never passes for an integer, nothing non-finite for anything
    ("1000000000.0\n", "1000000007\n"), ("1000000007.0\n", "1000000007\n"), ("3.0\n", "3\n"), ("3e0\n", "3\n"),
    ("1e999\n", "9" * 400 + "\n"), ("1e400\n", "1" * 400 + "\n"), ("inf\n", "5\n"), ("nan\n", "0.5\n"),
    ("1e999\n", "1e308\n"), ("-inf\n", "-1.5\n"), ("infinity\n", "1.0\n"), ("9" * 400 + "\n", "1.5\n"),
    # not numbers in the expected output's syntax, though Python's int()/float() would read them
    ("0x10\n", "16\n"), ("1_000\n", "1000\n"), ("\uff11\uff12\n", "12\n"), ("1_0.5\n", "10.5\n"),
    ("9" * 4110 + "x\n", "9" * 4110 + "\n"), ("1.\n", "1\n"),
])
def test_stdio_outputs_that_do_not_match(actual, expected):
    assert not stdio_output_matches(actual, expected)


@pytest.mark.parametrize("actual, expected", [
    ([1, 5], [[1, 5]]), ([1, 5], [1, 5]), (3, [3]), ([[1, 2], [3]], [[[1, 2], [3]]]), ("ab", ["ab"]),
    (1.6666666666666667, [1.6666666666667]), (2, [2.0]), ({"a": [1, 2]}, [{"a": [1, 2]}]), (True, [1]),
    (None, [None]), ((1, 2), [[1, 2]]), ([(1, 2)], [[[1, 2]]]),
    # exactly equal, as Python (and APPS) compares them: a float that is exactly the integer
    (2.0, [2]), (1e20, [10 ** 20]),
    # issue 31, class 2: values a Python programmer returns, by value
    (numpy.int64(3), [3]), (numpy.bool_(True), [True]), (numpy.float32(0.5), [0.5]), (numpy.uint8(7), 7),
    (Counter({"a": 2}), [{"a": 2}]), (OrderedDict(b=1, a=2), [{"a": 2, "b": 1}]),
    (defaultdict(int, a=1), [{"a": 1}]), ([numpy.int64(1), numpy.float64(2.5)], [[1, 2.5]]),
    ({1: 2}, [{"1": 2}]), (Counter({3: 1}), {"3": 1}),  # APPS converts expected dict keys to int
])
def test_call_outputs_that_match(actual, expected):
    assert call_output_matches(actual, expected)


@pytest.mark.parametrize("actual, expected", [
    (1, [1, 2]), ([5, 1], [[1, 5]]), (1.67, [1.6666666666667]), ({"1": 2}, [{"2": 2}]), ("3", [3]),
    ([1, 2, 3], [[1, 2]]), ({1, 2}, [[1, 2]]), (deque([1, 2]), [[1, 2]]), (numpy.array([1, 2]), [[1, 2]]),
    # issue 31, class 1: no float tolerance for an integer answer, nothing non-finite for a finite answer
    (1000000000.0, [1000000007]), (1000000006.9999999, [1000000007]), (1e20, [10 ** 20 + 1]),
    (float("inf"), [10 ** 400]), (float("inf"), [1.5e308]), (float("nan"), [0.5]), (float("nan"), [1]),
    (1.5, [1]), (True, ["True"]), (None, [0]), (10 ** 400, [1e308]),
])
def test_call_outputs_that_do_not_match(actual, expected):
    assert not call_output_matches(actual, expected)


# ------------------------------------------------------------------------------------------------ APPS fixtures

@pytest.mark.parametrize("problem_id", [4001, 4002, 4003, 4004, 4005])
def test_apps_reference_solutions_pass(problem_id):
    task = apps_task(apps_rows()[problem_id])
    for solution in task.solutions:
        result = execute_program(task, solution, LIMITS)
        assert result.outcome is ProgramOutcome.PASSED, result.detail
        assert result.test_outcomes == (P,) * len(task.inputs)


def test_apps_fixture_styles_and_difficulties():
    tasks = {problem_id: apps_task(row) for problem_id, row in apps_rows().items() if problem_id < 4006}
    assert [validate_task(tasks[problem_id]) for problem_id in sorted(tasks)] == [
        ProgramMode.STDIO, ProgramMode.STDIO, ProgramMode.CALL, ProgramMode.CALL, ProgramMode.CALL]
    assert {task.difficulty for task in tasks.values()} == {"introductory", "interview", "competition"}


@pytest.mark.parametrize("problem_id, program, expected", [
    (4001, "t = int(input())\nfor _ in range(t):\n    a, b = map(int, input().split())\n"
           "    print(a + b if a >= 0 else a)\n", (P, F, P)),
    (4002, "a, b = map(int, input().split())\nprint('%.2f' % (a / b))\n", (F, F, P)),  # 0.33 is too coarse
    (4003, "def min_max(lst):\n    return max(lst), min(lst)\n", (F, F, P)),
    (4004, "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
           "        return [0, 1]\n", (P, F, P)),
    (4005, "def average(numbers):\n    return sum(numbers) // len(numbers)\n", (F, P, P)),
])
def test_apps_wrong_solutions_fail_the_right_tests(problem_id, program, expected):
    result = execute_program(apps_task(apps_rows()[problem_id]), program, LIMITS)
    assert result.test_outcomes == expected
    assert result.outcome is ProgramOutcome.FAILED and result.detail.startswith(f"test {expected.index(F)}:")


def test_apps_prelude_provides_the_apps_imports_a_program_mentions():
    task = stdio_task(["3\n"], ["6\n"])
    program = ("n = int(input())\nh = []\nheappush(h, n)\n"
               "print(int(np.prod(list(accumulate(range(1, h[0] + 1))))) // 3 + gcd(0, 0))\n")
    assert execute_program(task, program, LIMITS).outcome is ProgramOutcome.PASSED
    assert apps_prelude("print(input())") == ""
    assert apps_prelude(program).splitlines()[0] == "from itertools import accumulate, product, permutations, " \
                                                    "combinations"


# ------------------------------------------------------------------------------------------- malformed tests

def test_bad_json_is_a_malformed_task_with_its_id():
    with pytest.raises(MalformedTaskError) as caught:
        apps_task(apps_rows()[4006])
    assert caught.value.task_id == "4006" and "not valid JSON" in str(caught.value)


def test_length_mismatch_is_reported_not_raised():
    result = execute_program(apps_task(apps_rows()[4007]), "print(input())", LIMITS)
    assert result.outcome is ProgramOutcome.MALFORMED_TASK and result.test_outcomes == ()
    assert "4007" in result.detail and "2 test inputs but 1 expected outputs" in result.detail


@pytest.mark.parametrize("task, reason", [
    (CodeTask(task_id="a", prompt=""), "no test cases"),
    (CodeTask(task_id="b", prompt="", fn_name="f", inputs=[1], outputs=[1]), "not an argument list"),
    (CodeTask(task_id="c", prompt="", fn_name="f x", inputs=[[1]], outputs=[1]), "not an identifier"),
    (CodeTask(task_id="d", prompt="", inputs=[3], outputs=["3"]), "is not text"),
    (CodeTask(task_id="e", prompt="", test_code="def check(c):\n    assert c(1)\n"), "entry_point"),
    (CodeTask(task_id="f", prompt="", test_code="def check(c:\n", entry_point="f"), "does not compile"),
])
def test_validate_task_names_the_problem(task, reason):
    with pytest.raises(MalformedTaskError, match=reason) as caught:
        validate_task(task)
    assert caught.value.task_id == task.task_id


@pytest.mark.parametrize("input_output", ['["a"]', '{"inputs": "1", "outputs": []}', '{"inputs": [], '
                                          '"outputs": [], "fn_name": 3}', None])
def test_apps_test_cases_rejects_bad_shapes(input_output):
    with pytest.raises(MalformedTaskError):
        apps_test_cases("x", input_output)


# ---------------------------------------------------------------------------------------------- stop policies

def test_stop_policies():
    task = stdio_task(["1\n", "2\n", "3\n"], ["1\n", "2\n", "3\n"])
    wrong_then_crash = "x = int(input())\nif x == 2:\n    1 / 0\nprint(x if x != 1 else 0)\n"
    assert execute_program(task, wrong_then_crash, LIMITS, StopPolicy.NEVER).test_outcomes == (F, E, P)
    assert execute_program(task, wrong_then_crash, LIMITS, StopPolicy.FIRST_ERROR).test_outcomes == (F, E, S)
    assert execute_program(task, wrong_then_crash, LIMITS, StopPolicy.FIRST_NON_PASS).test_outcomes == (F, S, S)


def test_compile_error_skips_every_test():
    result = execute_program(stdio_task(["1\n", "2\n"], ["1\n", "2\n"]), "print(input()", LIMITS)
    assert result.outcome is ProgramOutcome.COMPILE_ERROR and result.test_outcomes == (S, S)
    assert "SyntaxError" in result.detail


# ----------------------------------------------------------------- verdicts independent of the shared child

def test_tests_after_a_timeout_or_crash_run_in_a_fresh_child():
    task = stdio_task([f"{index}\n" for index in range(5)], [f"{index}\n" for index in range(5)])
    program = ("import ctypes, os\nx = int(input())\nif x == 1:\n    while True:\n        pass\n"
               "if x == 2:\n    ctypes.string_at(0)\nprint(x, flush=True)\nif x == 3:\n    os._exit(0)\n")
    assert execute_program(task, program, LIMITS).test_outcomes == (P, T, E, P, P)


def test_state_changed_by_one_test_does_not_leak_into_the_next():
    task = stdio_task(["1\n", "400\n", "3\n"], ["1\n", "400\n", "3\n"])
    program = ("import builtins, sys, os, signal\nx = int(input())\nif x == 1:\n"
               "    builtins.input = lambda: '999'\n    builtins.print = None\n    sys.setrecursionlimit(60)\n"
               "    sys.stdout.write('1\\n')\n    os.chdir('/')\n    signal.setitimer(signal.ITIMER_REAL, 0.2)\n"
               "    sys.exit(0)\n"
               "import time\ntime.sleep(0.3 if x == 400 else 0)  # a leaked interval timer would fire here\n"
               "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nprint(depth(x))\n")
    assert execute_program(task, program, LIMITS).test_outcomes == (P, P, P)


def test_threads_are_joined_and_daemon_threads_do_not_outlive_their_test():
    task = stdio_task(["a\n", "b\n"], ["a\n", "b\n"])
    joined = "import threading\nthreading.Thread(target=lambda: print(input())).start()\n"
    assert execute_program(task, joined, LIMITS).test_outcomes == (P, P)
    daemon = ("import threading, time\ndef spin():\n    while True:\n        time.sleep(0.01)\n"
              "line = input()\nif line == 'a':\n    threading.Thread(target=spin, daemon=True).start()\n"
              "print(line)\n")
    assert execute_program(task, daemon, LIMITS).test_outcomes == (P, P)  # b runs in a fresh child


def test_exit_codes_in_standard_io():
    task = stdio_task(["1\n"], ["1\n"])
    assert execute_program(task, "print(input())\nexit()", LIMITS).outcome is ProgramOutcome.PASSED
    assert execute_program(task, "print(input())\nquit(0)", LIMITS).outcome is ProgramOutcome.PASSED
    assert execute_program(task, "import sys\nprint(input())\nsys.exit(3)", LIMITS).outcome \
        is ProgramOutcome.RUNTIME_ERROR
    assert execute_program(task, "import sys\nprint(input())\nsys.exit('bye')", LIMITS).outcome \
        is ProgramOutcome.RUNTIME_ERROR


def test_stderr_budget_is_per_test():
    task = stdio_task([f"{index}\n" for index in range(4)], [f"{index}\n" for index in range(4)])
    program = "import sys\nsys.stderr.write('debug ' * 100_000)\nprint(input())\n"  # 700 kB a test
    limits = SandboxLimits(test_timeout_s=2.0, max_output_bytes=1 << 20)
    assert execute_program(task, program, limits).test_outcomes == (P, P, P, P)


def test_fd_level_standard_io():
    task = stdio_task(["4 5\n"], ["9\n"])
    for program in ("a, b = map(int, open(0).read().split())\nprint(a + b)",
                    "import sys, os\na, b = map(int, sys.stdin.buffer.read().split())\nos.write(1, b'%d\\n' % (a+b))",
                    "import sys\ninput = sys.stdin.readline\na, b = map(int, input().split())\n"
                    "sys.stdout.write(str(a + b) + '\\n')"):
        assert execute_program(task, program, LIMITS).outcome is ProgramOutcome.PASSED, program


def test_call_based_errors():
    task = CodeTask(task_id="call", prompt="", fn_name="f", inputs=[[1], [2]], outputs=[[1], [2]])
    assert execute_program(task, "def g(x):\n    return x", LIMITS).test_outcomes == (E, E)
    assert execute_program(task, "raise ValueError\ndef f(x):\n    return x", LIMITS).test_outcomes == (E, E)
    assert execute_program(task, "def f(x):\n    return {x}", LIMITS).test_outcomes == (F, F)
    assert execute_program(task, "def f(x):\n    return 1 / (x - 1)", LIMITS).test_outcomes == (E, F)
    counter = "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)\n"  # one module per child
    assert execute_program(task, counter, LIMITS).test_outcomes == (P, P)


def test_execute_programs_keeps_order():
    task = stdio_task(["1\n"], ["1\n"])
    programs = ["print(input())", "print(2)", "print(input(", "1/0", "print(input())"]
    results = execute_programs([task] * len(programs), programs, LIMITS, max_workers=2)
    assert [result.outcome for result in results] == [
        ProgramOutcome.PASSED, ProgramOutcome.FAILED, ProgramOutcome.COMPILE_ERROR,
        ProgramOutcome.RUNTIME_ERROR, ProgramOutcome.PASSED]
    with pytest.raises(ValueError):
        execute_programs([task], [], LIMITS)
