"""The answer verifier (``dschat.rewards.verify_answer``, ``--reward verifier``): a table of answer forms written
here (equivalent and not) on the embedded task and on GSM8K / MATH-style strings, and its verdicts on 200 held-out
reference solutions, unperturbed and perturbed, all of which must be right."""
import random

import pytest

from dschat.data import load_pairs
from dschat.rewards import answer_reward, has_answer, verify_answer

REFERENCE = " 27 + 41 = 68\n68 - 13 = 55\nAnswer: 55"


@pytest.mark.parametrize("response, right", [
    (REFERENCE, True),
    (" 27 + 41 = 60\n60 - 13 = 47\nAnswer: 55", True),  # the verifier reads the answer only (chain_errors the steps)
    ("Answer: 055", True),  # the same integer
    ("Answer:55  ", True),
    ("Answer: 12\nAnswer: 55", True),  # the last answer line counts
    ("Answer: 55\nAnswer: 12", False),
    ("Answer: 54", False),
    ("Answer: -55", False),
    ("Answer: 55.0", False),  # the embedded task's answers are integers, written as such
    ("answer: 55", False),
    ("The answer is 55", False),
    ("55", False),
    ("Answer: 55 apples", False),
    ("", False),
])
def test_arithmetic_answer_forms(response, right):
    assert verify_answer(response, REFERENCE, "arithmetic") is right
    assert verify_answer(response, "55", "arithmetic") is right  # a bare reference answer reads the same


@pytest.mark.parametrize("reference, response, right", [
    ("1/2", "0.5", True),
    ("\\frac{1}{2}", "0.5", True),
    ("$\\frac{1}{2}$", "1/2", True),
    ("$\\frac12$", "$0.5$", True),
    ("\\boxed{\\frac{1}{2}}", "The probability is $\\boxed{0.5}$.", True),
    ("3", "$x = 3$", True),
    ("$x = 3$", "3", True),
    ("\\boxed{3}", "so $x = 3$", True),
    ("Natalia sold 48 + 24 = 72 clips.\nAnswer: 72", "She sold 72 clips.\nAnswer: 72", True),
    ("Answer: 72", "72.0", True),
    ("1000", "$1,000$", True),
    ("$50\\%$", "0.5", True),
    ("$\\sqrt{2}/2$", "$\\frac{\\sqrt{2}}{2}$", True),
    ("$(x+1)^2$", "$x^2+2x+1$", True),
    ("$\\{1,2\\}$", "$\\{2,1\\}$", True),
    ("$x \\le 3$", "$(-\\infty, 3]$", True),  # math-verify's verify is not symmetric: gold (the reference) first
    ("$(-\\infty, 3]$", "$x \\le 3$", False),
    ("1/2", "0.6", False),
    ("$\\frac{1}{3}$", "$0.333$", False),
    ("2/3", "0.67", False),
    ("3", "$-3$", False),
    ("$x = 3$", "$y = 3$", False),
    ("$(1,2)$", "$(2,1)$", False),
    ("$2\\pi$", "$6.28$", False),
    ("Answer: 72", "Answer: 71", False),
    ("Answer: 72", "I do not know", False),
    ("Answer: 72", "", False),
])
@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_math_answer_forms_as_math_verify_judges_them(reference, response, right, task):
    assert verify_answer(response, reference, task) is right


def test_reward_is_the_verdict_plus_the_optional_format_term():
    assert answer_reward("Answer: 55", REFERENCE, "arithmetic") == 1.0
    assert answer_reward("Answer: 54", REFERENCE, "arithmetic") == 0.0
    assert answer_reward("Answer: 54", REFERENCE, "arithmetic", format_weight=0.25) == 0.25
    assert answer_reward("Answer: 55", REFERENCE, "arithmetic", format_weight=0.25) == 1.25
    assert answer_reward("no answer", REFERENCE, "arithmetic", format_weight=0.25) == 0.0
    assert has_answer("$\\boxed{2}$", "math") and not has_answer("nothing", "gsm8k")


def test_unknown_task_and_reference_without_answer_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        verify_answer("Answer: 1", "1", "chess")
    with pytest.raises(ValueError, match="has no 'Answer: N' line"):
        verify_answer("Answer: 1", " 1 + 2 = 3", "arithmetic")


def perturbations(solution: str, rng: random.Random):
    """(response, right) variants of a reference solution: itself, re-spaced and a wrong step (right), the
    answer off by a nonzero amount, the answer line dropped, or lower-cased (wrong)."""
    lines = solution.split("\n")
    answer = int(lines[-1].split()[1])
    off = answer + rng.choice([-1, 1]) * rng.randint(1, 30)
    steps = lines[:-1]
    return [(solution, True), ("\n".join(steps + [f"Answer:  {answer} "]), True),
            ("\n".join(steps[:1] + ["1 + 1 = 3"] + steps[2:] + lines[-1:]), True),
            ("\n".join(steps + [f"Answer: {off}"]), False), ("\n".join(steps), False),
            ("\n".join(steps + [lines[-1].lower()]), False)]


def test_verdicts_on_200_held_out_reference_solutions_are_all_right():
    rng = random.Random(0)
    for pair in load_pairs("arithmetic", "validation")[:200]:
        for response, right in perturbations(pair.chosen, rng):
            assert verify_answer(response, pair.chosen, "arithmetic") is right, response


def test_math_verify_verdicts_on_200_held_out_answers_in_other_forms_are_all_right():
    """The held-out answers of the embedded task written as GSM8K / MATH answers are: the same number boxed, as
    a fraction or a decimal is right; the number off by one is wrong."""
    rng = random.Random(1)
    for pair in load_pairs("arithmetic", "validation")[:200]:
        answer = int(pair.chosen.rsplit(" ", 1)[1])
        same = rng.choice([f"$\\boxed{{{answer}}}$", f"$\\frac{{{2 * answer}}}{{2}}$", f"{answer}.0",
                           f"The answer is ${answer}$."])
        assert verify_answer(same, f"Answer: {answer}", "gsm8k"), same
        assert not verify_answer(f"$\\boxed{{{answer + rng.choice([-1, 1])}}}$", f"Answer: {answer}", "math")
