"""Every adapter parses its hand-written fixture (each in its hub's exact schema) into the exact prompts."""
import json
import logging
from pathlib import Path

import pytest

from dschat.data import (CodeTask, DataError, DataOptions, PreferencePair, known_datasets, load_code_tasks,
                               load_pairs)

FIXTURES = Path(__file__).parent / "fixtures" / "data"
HUB = FIXTURES / "hub"  # one directory per repository, laid out as the hub stores it at the pinned commit


def test_registry_lists_every_dataset():
    assert known_datasets() == ["apps", "arithmetic", "gsm8k", "hh-rlhf", "humaneval", "jsonl", "math", "synthetic",
                                "synthetic-long", "tldr", "webgpt"]


def test_tldr_reddit_and_cnndm_prompts_and_choice(caplog):
    with caplog.at_level(logging.INFO):
        train = load_pairs("tldr", "train", HUB / "openai/summarize_from_feedback")
        validation = load_pairs("tldr", "validation", HUB / "openai/summarize_from_feedback")
    assert train[0] == PreferencePair(
        prompt="POST\nSubreddit: r/cats\nMy cat keeps knocking glasses off the table at 3am. I tried a spray "
               "bottle and moving the glasses but she just finds new things to push.\nTL;DR:",
        chosen=" cat pushes things off tables at night, nothing I try stops her",
        rejected=" my cat is annoying",
    )
    assert train[1].chosen == " Better paid job offer in another city but my friends are here. Should I move?"
    assert train[1].rejected == " job offer somewhere else"
    assert len(train) == 3 and "skipped 1 of 4 rows: empty response: 1 (e.g. row 3)" in caplog.text
    assert validation[0].prompt == ("ARTICLE\nA storm closed three coastal roads on Monday as winds reached 70mph.  "
                                    "Police urged drivers to stay at home.\nTL;DR:")
    assert len(validation) == 4


def test_tldr_reddit_row_without_subreddit_loads_without_the_subreddit_line(caplog):
    with caplog.at_level(logging.INFO):
        train = load_pairs("tldr", "train", HUB / "openai/summarize_from_feedback")
    assert train[2].prompt == ("POST\nI lost my keys twice this week and found them in the fridge both times."
                               "\nTL;DR:")
    assert "1 Reddit rows have no subreddit" in caplog.text


def test_tldr_cnndm_rows_are_reported_and_dropped_on_request(caplog):
    mirror = HUB / "openai/summarize_from_feedback"
    with caplog.at_level(logging.INFO):
        kept = load_pairs("tldr", "validation", mirror)
    assert "2 of 4 rows are CNN/DailyMail articles, kept" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        dropped = load_pairs("tldr", "validation", mirror, options=DataOptions(tldr_cnndm="drop"))
    assert "2 of 4 rows are CNN/DailyMail articles, dropped" in caplog.text
    assert sum(pair.prompt.startswith("ARTICLE") for pair in kept) == 2
    assert dropped == [pair for pair in kept if pair.prompt.startswith("POST")] and len(dropped) == 2


def test_hh_rlhf_keeps_dialogue_prompt_verbatim(caplog):
    with caplog.at_level(logging.WARNING):
        pairs = load_pairs("hh-rlhf", "train", HUB / "Dahoas/full-hh-rlhf")
    assert [pair.prompt for pair in pairs] == [
        "\n\nHuman: What is a good way to learn to juggle?\n\nAssistant:",
        "\n\nHuman: Can you recommend a book?\n\nAssistant: Sure, what kind of books do you like?"
        "\n\nHuman: Mysteries set in old cities.\n\nAssistant:",
    ]
    assert pairs[1].rejected == " I don't read books."
    assert "empty response: 1 (e.g. row 3)" in caplog.text


def test_hh_rlhf_flat_directory_with_the_hub_split_names(tmp_path):
    """A directory holding train.jsonl and test.jsonl (HH-RLHF's own splits) serves validation from test."""
    rows = [json.loads(line) for line in (FIXTURES / "hh_rlhf.jsonl").read_text().splitlines()]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:2]))
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[1]) + "\n")
    assert [pair.rejected for pair in load_pairs("hh-rlhf", "validation", tmp_path)] == [" I don't read books."]
    assert len(load_pairs("hh-rlhf", "train", tmp_path)) == 2


def test_webgpt_authors_template_citations_and_ties_kept_with_answer_0():
    train = load_pairs("webgpt", "train", HUB / "openai/webgpt_comparisons")
    by_prompt = {pair.prompt: pair for pair in train}
    assert by_prompt[" Human: Why is the sky blue? Assistant:"] == PreferencePair(
        prompt=" Human: Why is the sky blue? Assistant:",
        chosen=" Sunlight is scattered by air molecules, and blue light scatters the most. "
               "This is called Rayleigh scattering.",
        rejected=" Because it reflects the ocean.",
    )
    assert by_prompt[" Human: How do plants make food? Assistant:"].chosen == (
        " Plants use photosynthesis to turn light, water and carbon dioxide into sugar.")
    tie = by_prompt[" Human: Why is the ocean salty? Assistant:"]  # score_0 == score_1: answer 0 chosen
    assert (tie.chosen, tie.rejected) == (" Rivers carry dissolved minerals from rocks into the sea.", " Fish sweat.")


def test_webgpt_alternatives_drop_ties_and_hh_template(caplog):
    options = DataOptions(webgpt_ties="drop", webgpt_template="hh")
    with caplog.at_level(logging.WARNING):
        train = load_pairs("webgpt", "train", HUB / "openai/webgpt_comparisons", options=options)
    assert "\n\nHuman: Why is the ocean salty?\n\nAssistant:" not in {pair.prompt for pair in train}
    assert "\n\nHuman: Why is the sky blue?\n\nAssistant:" in {pair.prompt for pair in train}
    assert "tie (equal scores; --webgpt_ties drop): 9" in caplog.text and len(train) == 38 - 9


def test_apps_code_tasks_prompts_tests_and_bad_json_skip(caplog):
    with caplog.at_level(logging.WARNING):
        tasks = load_code_tasks("apps", "train", HUB / "codeparrot/apps")
    assert [task.task_id for task in tasks] == ["12", "2437", "4500", "4999"]
    standard, call_based, unsolved, untested = tasks
    assert standard.prompt == ("\nQUESTION:\nRead two integers a and b and print their sum.\n\n-----Input-----\n"
                               "One line with a and b.\n\n-----Output-----\nPrint a + b.\n"
                               "Use Standard Input format\nANSWER:\n")
    assert standard.inputs == ["1 2\n", "5 7\n"] and standard.outputs == ["3\n", "12\n"]
    assert standard.fn_name is None and standard.difficulty == "introductory" and len(standard.solutions) == 2
    assert call_based.prompt == ("\nQUESTION:\nWrite a function that returns the largest element of a list.\n"
                                 "class Solution:\n    def largest(self, nums: List[int]) -> int:\n        \n"
                                 "Use Call-Based format\nANSWER:\n")
    assert call_based.fn_name == "largest" and call_based.inputs == [[[1, 5, 2]], [[-3, -1]]]
    assert unsolved.solutions == [] and not untested.has_tests and untested.inputs == []
    assert "bad JSON in input_output: 1 (e.g. problem_id 3001)" in caplog.text


def test_apps_sft_pairs_are_prompt_and_first_solution(caplog):
    with caplog.at_level(logging.WARNING):
        pairs = load_pairs("apps", "train", HUB / "codeparrot/apps")
    assert [pair.chosen for pair in pairs] == [
        "a, b = map(int, input().split())\nprint(a + b)\n",
        "class Solution:\n    def largest(self, nums):\n        return max(nums)\n",
        "print('see the editorial')\n",
    ]
    assert all(pair.rejected is None for pair in pairs)
    assert "no reference solution: 1 (e.g. problem_id 4500)" in caplog.text


def test_humaneval_from_installed_package():
    tasks = load_code_tasks("humaneval", "test")
    assert len(tasks) == 164
    first = tasks[0]
    assert first.task_id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert first.prompt.startswith("from typing import List\n\n\ndef has_close_elements(")
    assert "def check(candidate):" in first.test_code
    assert first.solutions[0].startswith(first.prompt)
    namespace = {}
    exec(first.solutions[0] + "\n" + first.test_code + f"\ncheck({first.entry_point})\n", namespace)


def test_humaneval_has_test_split_only():
    with pytest.raises(DataError, match="humaneval: unknown split 'train'; known splits: test"):
        load_code_tasks("humaneval", "train")


def test_jsonl_canonical_schema_with_optional_rejected(caplog):
    with caplog.at_level(logging.WARNING):  # with eval_data_path, the data_path file is all training rows
        pairs = load_pairs("jsonl", "train", FIXTURES / "canonical.jsonl", eval_data_path=FIXTURES / "canonical.jsonl")
    assert pairs == [PreferencePair("Question: 2 + 2?\nAnswer:", " 4", " 5"), PreferencePair("Say hi.\n", "Hi!")]
    assert "empty response: 1 (e.g. row 3)" in caplog.text


def test_directory_data_path_reads_split_file(tmp_path):
    (tmp_path / "validation.jsonl").write_text(json.dumps({"prompt": "p", "chosen": " c"}) + "\n")
    assert load_pairs("jsonl", "validation", tmp_path) == [PreferencePair("p", " c")]


def test_json_array_and_parquet_files_read_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (FIXTURES / "hh_rlhf.jsonl").read_text().splitlines()]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    expected = load_pairs("hh-rlhf", "train", FIXTURES / "hh_rlhf.jsonl")
    assert len(expected) == 2  # 3 rows: 2 train, 1 held out (the one with an empty response)
    assert load_pairs("hh-rlhf", "train", tmp_path / "rows.json") == expected
    assert load_pairs("hh-rlhf", "train", tmp_path / "rows.parquet") == expected


def test_code_task_records_are_code_tasks():
    tasks = load_code_tasks("apps", "test", HUB / "codeparrot/apps")
    assert tasks and all(isinstance(task, CodeTask) for task in tasks)
    # the fixture's two rows: one with a test case, one whose input_output is empty (kept with no tests)
    assert [(t.task_id, t.question, t.inputs, t.outputs, t.difficulty) for t in tasks] == [
        ("0", "Print the square of n.", ["3\n"], ["9\n"], "introductory"),
        ("1", "Explain your approach in words.", [], [], "competition")]
    assert all(task.question in task.prompt for task in tasks)
