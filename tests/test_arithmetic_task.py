"""The embedded reasoning task (``--data_name arithmetic``): its problems, worked solutions and held-out split,
checked against an evaluation written here (Python's own left-to-right arithmetic on the prompt's text)."""

import pytest
from tokenizers import Tokenizer

from dschat.data import DataError, load_pairs
from dschat.data.arithmetic_task import chain_errors, final_answer, problem_of_prompt, split_problems
from dschat.data.synthetic_task import SYNTHETIC_TOKENIZER_DIR


@pytest.fixture(scope="module")
def splits():
    return {split: load_pairs("arithmetic", split) for split in ("train", "validation")}


def operations(prompt: str) -> tuple:
    """(start, [(op, operand), ...] for every step) read here from the prompt: "Start N, mod 10, R rounds:", then
    the program's lines "x:?<op><b>=?", then a newline; the program repeated R times."""
    lines = prompt.split("\n")
    head, program = lines[0].split(", "), lines[1:-1]
    assert head[0].startswith("Start ") and head[1] == "mod 10" and head[2].endswith(" rounds:") and lines[-1] == ""
    assert [line[:3] for line in program] == [f"{x}:?" for x in "abc"] and all(len(line) == 7 for line in program)
    assert all(line.endswith("=?") for line in program)
    return int(head[0][len("Start "):]), [(line[3], line[4]) for line in program] * int(head[2].split()[0])


def left_to_right(prompt: str) -> list:
    """The chain's values from the prompt's operations, evaluated here one by one, mod 10."""
    start, ops = operations(prompt)
    values = [start]
    for op, operand in ops:
        values.append(eval(f"({values[-1]} {op} {operand}) % 10"))  # noqa: S307 -- digits and one operator
    return values


def test_splits_have_their_sizes_are_deterministic_and_share_no_prompt(splits):
    assert len(splits["train"]) == 16000 and len(splits["validation"]) == 400
    assert load_pairs("arithmetic", "validation") == splits["validation"]
    train_prompts = {pair.prompt for pair in splits["train"]}
    assert len(train_prompts) == 16000
    assert not train_prompts & {pair.prompt for pair in splits["validation"]}
    with pytest.raises(DataError, match="unknown split 'test'"):
        load_pairs("arithmetic", "test")


def test_every_worked_solution_is_the_chain_of_the_prompts_expression(splits):
    for pair in splits["train"][:500] + splits["validation"]:
        values = left_to_right(pair.prompt)
        lines = pair.chosen[1:].split("\n")
        assert pair.chosen.startswith(" ")
        assert len(values) - 1 == 9 and all(0 <= v <= 9 for v in values)
        assert lines[-1] == f"Answer: {values[-1]}"
        for k, line in enumerate(lines[:-1]):
            label, a, op, b, eq, c = line[:2], line[2], line[3], line[4], line[5], line[6:]
            assert (label, int(a), eq, int(c)) == ("abc"[k % 3] + ":", values[k], "=", values[k + 1])
            assert eval(f"({a} {op} {b}) % 10") == int(c)  # noqa: S307
        assert final_answer(pair.chosen) == values[-1] and chain_errors(pair.chosen, problem_of_prompt(pair.prompt)) == []


def test_responses_are_long_enough_and_each_step_is_a_fixed_distance_from_its_operation(splits):
    """>= 64 response tokens with the shipped tokenizer (the task's design requirement); every prompt has the same
    number of tokens, and in prompt + solution each step's operator and operand are the tokens 24 back (3 lines of
    8 tokens: the program's line, or the step that applied it a round before), the lookup the task makes plain."""
    tokenizer = Tokenizer.from_file(str(SYNTHETIC_TOKENIZER_DIR / "tokenizer.json"))
    pairs = splits["validation"]
    assert {len(e.ids) for e in tokenizer.encode_batch([p.chosen for p in pairs])} == {80}
    assert {len(e.ids) for e in tokenizer.encode_batch([p.prompt for p in pairs])} == {44}
    for pair in pairs[:50]:
        tokens = tokenizer.encode(pair.prompt + pair.chosen).tokens
        assert tokens[44] == "Ġa"  # the solution starts right after the prompt's last newline
        ops = [i for i in range(44, len(tokens)) if tokens[i] in "+*"]
        assert len(ops) == 9 and all(tokens[i:i + 2] == tokens[i - 24:i - 22] for i in ops)


def test_one_wrong_step_always_makes_the_answer_wrong(splits):
    """Right-for-the-wrong-reasons needs two compensating errors: a chain with one wrong value, continued
    correctly from it, never ends on the reference answer (every operation is a bijection mod 10)."""
    for pair in splits["validation"]:
        values, ops = left_to_right(pair.prompt), operations(pair.prompt)[1]
        for step in range(len(values) - 1):
            for value in set(range(10)) - {values[step]}:
                for op, operand in ops[step:]:
                    value = eval(f"({value} {op} {operand}) % 10")  # noqa: S307
                assert value != values[-1]


def test_chain_errors_name_the_steps_that_do_not_follow():
    problem = split_problems("validation")[0]
    lines = problem.solution()[1:].split("\n")
    wrong_result = lines[:1] + [lines[1][:-1] + str((int(lines[1][-1]) + 1) % 10)] + lines[2:]
    assert chain_errors(" " + "\n".join(wrong_result), problem) == [1, 2]  # step 2 starts from the right value
    other = "1" if lines[2][4] != "1" else "2"
    wrong_operand = lines[:2] + [lines[2][:4] + other + lines[2][5:]] + lines[3:]
    assert chain_errors(" " + "\n".join(wrong_operand), problem) == [2]
    assert chain_errors(" " + "\n".join(lines[:2] + lines[-1:]), problem) == list(range(2, len(lines) - 1))
    assert chain_errors(" nonsense\nAnswer: 3", problem) == list(range(len(lines) - 1))


@pytest.mark.parametrize("response, answer", [(" 1 + 2 = 3\nAnswer: 3", 3), ("Answer: 3\nAnswer: -4", -4),
                                              ("Answer:12 ", 12), ("Answer: 3.0", None), ("answer: 3", None),
                                              ("The answer is 3", None), ("", None)])
def test_final_answer_reads_the_last_answer_line(response, answer):
    assert final_answer(response) == answer


def test_data_path_reads_canonical_jsonl_instead(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "Start 1, mod 10, 1 rounds:\\na:?+2=?\\n", '
                                          '"chosen": " 1 + 2 = 3\\nAnswer: 3"}\n')
    assert [p.chosen for p in load_pairs("arithmetic", "train", str(tmp_path))] == [" 1 + 2 = 3\nAnswer: 3"]
