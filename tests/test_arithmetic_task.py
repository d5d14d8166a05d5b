"""The embedded reasoning task (``--data_name arithmetic``): its problems, worked solutions and held-out split,
checked against an evaluation written here (Python's own left-to-right arithmetic on the prompt's text)."""
import re

import pytest
from tokenizers import Tokenizer

from dschat.data import DataError, load_pairs
from dschat.data.arithmetic_task import chain_errors, final_answer, problem_of_prompt, split_problems
from dschat.data.synthetic_task import SYNTHETIC_TOKENIZER_DIR


@pytest.fixture(scope="module")
def splits():
    return {split: load_pairs("arithmetic", split) for split in ("train", "validation")}


def operations(prompt: str) -> tuple:
    """(start, [(op, operand), ...]) read here from the prompt's lines: "Start with N." then "x: op b"."""
    lines = prompt.split("\n")
    assert lines[0].startswith("Start with ") and lines[0].endswith(".") and lines[-1] == "Solution:"
    ops = [line.split(": ")[1].split() for line in lines[1:-1]]
    assert [line.split(": ")[0] for line in lines[1:-1]] == list("abcdef"[:len(ops)])
    return int(lines[0][len("Start with "):-1]), ops


def left_to_right(prompt: str) -> list:
    """The chain's values from the prompt's operations, evaluated here one by one."""
    start, ops = operations(prompt)
    values = [start]
    for op, operand in ops:
        values.append(eval(f"{values[-1]} {op} {operand}"))  # noqa: S307 -- digits and one operator
    return values


def test_splits_have_their_sizes_are_deterministic_and_share_no_prompt(splits):
    assert len(splits["train"]) == 8000 and len(splits["validation"]) == 400
    assert load_pairs("arithmetic", "validation") == splits["validation"]
    train_prompts = {pair.prompt for pair in splits["train"]}
    assert len(train_prompts) == 8000
    assert not train_prompts & {pair.prompt for pair in splits["validation"]}
    with pytest.raises(DataError, match="unknown split 'test'"):
        load_pairs("arithmetic", "test")


def test_every_worked_solution_is_the_chain_of_the_prompts_expression(splits):
    for pair in splits["train"][:500] + splits["validation"]:
        values = left_to_right(pair.prompt)
        lines = pair.chosen[1:].split("\n")
        assert pair.chosen.startswith(" ")
        assert 5 <= len(values) - 1 <= 6 and all(0 <= v <= 99 for v in values)
        assert lines[-1] == f"Answer: {values[-1]}"
        for k, line in enumerate(lines[:-1]):
            label, a, op, b, eq, c = line.split()
            assert (label, int(a), eq, int(c)) == ("abcdef"[k] + ":", values[k], "=", values[k + 1])
            assert eval(f"{a} {op} {b}") == int(c)  # noqa: S307
        assert final_answer(pair.chosen) == values[-1] and chain_errors(pair.chosen, problem_of_prompt(pair.prompt)) == []


def test_responses_are_long_enough_for_credit_assignment(splits):
    """>= 64 response tokens with the shipped tokenizer (the task's design requirement), prompts short."""
    tokenizer = Tokenizer.from_file(str(SYNTHETIC_TOKENIZER_DIR / "tokenizer.json"))
    lengths = [len(e.ids) for e in tokenizer.encode_batch([p.chosen for p in splits["validation"]])]
    assert min(lengths) >= 64 and max(lengths) <= 100
    assert max(len(e.ids) for e in tokenizer.encode_batch([p.prompt for p in splits["validation"]])) <= 64


def test_one_wrong_step_always_makes_the_answer_wrong(splits):
    """Right-for-the-wrong-reasons needs two compensating errors: a chain with one wrong value, continued
    correctly from it, never ends on the reference answer (every operation is a bijection)."""
    for pair in splits["validation"]:
        values, ops = left_to_right(pair.prompt), operations(pair.prompt)[1]
        for step in range(1, len(values) - 1):
            for error in (-10, -1, 1, 7):
                value = values[step] + error
                for op, operand in ops[step:]:
                    value = eval(f"{value} {op} {operand}")  # noqa: S307
                assert value != values[-1]


def test_chain_errors_name_the_steps_that_do_not_follow():
    problem = split_problems("validation")[0]
    lines = problem.solution()[1:].split("\n")
    label, a, op, b, _, c = lines[1].split()
    wrong_result = lines[:1] + [f"{label} {a} {op} {b} = {int(c) + 1}"] + lines[2:]
    assert chain_errors(" " + "\n".join(wrong_result), problem) == [1, 2]  # step 2 starts from the right value
    wrong_operand = lines[:2] + [re.sub(r" (\d+) =", " 1 =", lines[2])] + lines[3:]
    assert chain_errors(" " + "\n".join(wrong_operand), problem) == [2]
    assert chain_errors(" " + "\n".join(lines[:2] + lines[-1:]), problem) == list(range(2, len(lines) - 1))
    assert chain_errors(" nonsense\nAnswer: 3", problem) == list(range(len(lines) - 1))


@pytest.mark.parametrize("response, answer", [(" 1 + 2 = 3\nAnswer: 3", 3), ("Answer: 3\nAnswer: -4", -4),
                                              ("Answer:12 ", 12), ("Answer: 3.0", None), ("answer: 3", None),
                                              ("The answer is 3", None), ("", None)])
def test_final_answer_reads_the_last_answer_line(response, answer):
    assert final_answer(response) == answer


def test_data_path_reads_canonical_jsonl_instead(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "Start with 1.\\na: + 2\\nSolution:", '
                                          '"chosen": " 1 + 2 = 3\\nAnswer: 3"}\n')
    assert [p.chosen for p in load_pairs("arithmetic", "train", str(tmp_path))] == [" 1 + 2 = 3\nAnswer: 3"]
