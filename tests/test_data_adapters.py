"""Every adapter parses its hand-written fixture (each in its hub's exact schema) into the exact prompts."""
import json
import logging
from pathlib import Path

import pytest

from dschat.utils.data import CodeTask, DataError, PreferencePair, known_datasets, load_code_tasks, load_pairs

FIXTURES = Path(__file__).parent / "fixtures" / "data"


def test_registry_lists_every_dataset():
    assert known_datasets() == ["apps", "hh-rlhf", "humaneval", "jsonl", "synthetic", "tldr", "webgpt"]


def test_tldr_reddit_and_cnndm_prompts_and_choice(caplog):
    with caplog.at_level(logging.WARNING):
        pairs = load_pairs("tldr", "train", FIXTURES / "tldr_comparisons.jsonl")
    assert pairs[0] == PreferencePair(
        prompt="POST\nSubreddit: r/cats\nMy cat keeps knocking glasses off the table at 3am. I tried a spray "
               "bottle and moving the glasses but she just finds new things to push.\nTL;DR:",
        chosen=" cat pushes things off tables at night, nothing I try stops her",
        rejected=" my cat is annoying",
    )
    assert pairs[1].chosen == " Better paid job offer in another city but my friends are here. Should I move?"
    assert pairs[1].rejected == " job offer somewhere else"
    assert pairs[2].prompt == ("ARTICLE\nA storm closed three coastal roads on Monday as winds reached 70mph.  "
                               "Police urged drivers to stay at home.\nTL;DR:")
    assert len(pairs) == 3
    assert "skipped 1 of 4 rows: empty response: 1 (e.g. row 4)" in caplog.text


def test_hh_rlhf_keeps_dialogue_prompt_verbatim(caplog):
    with caplog.at_level(logging.WARNING):
        pairs = load_pairs("hh-rlhf", "train", FIXTURES / "hh_rlhf.jsonl")
    assert [pair.prompt for pair in pairs] == [
        "\n\nHuman: What is a good way to learn to juggle?\n\nAssistant:",
        "\n\nHuman: Can you recommend a book?\n\nAssistant: Sure, what kind of books do you like?"
        "\n\nHuman: Mysteries set in old cities.\n\nAssistant:",
    ]
    assert pairs[1].rejected == " I don't read books."
    assert "empty response: 1 (e.g. row 3)" in caplog.text


def test_webgpt_strips_citations_picks_higher_score_and_drops_ties(caplog):
    with caplog.at_level(logging.WARNING):
        train = load_pairs("webgpt", "train", FIXTURES / "webgpt_comparisons.jsonl")
    validation = load_pairs("webgpt", "validation", FIXTURES / "webgpt_comparisons.jsonl")
    assert train[0] == PreferencePair(
        prompt="\n\nHuman: Why is the sky blue?\n\nAssistant:",
        chosen=" Sunlight is scattered by air molecules, and blue light scatters the most. "
               "This is called Rayleigh scattering.",
        rejected=" Because it reflects the ocean.",
    )
    assert train[1].chosen == " Plants use photosynthesis to turn light, water and carbon dioxide into sugar."
    assert train[2].chosen == " Cats purr when content and also to soothe themselves when stressed."
    assert len(train) == 4 and "tie (equal scores): 1 (e.g. row 6)" in caplog.text
    assert validation == [PreferencePair("\n\nHuman: What is the capital of Australia?\n\nAssistant:",
                                         " Canberra is the capital.", " Canberra.")]


def test_webgpt_validation_part_is_seeded_and_disjoint():
    path = FIXTURES / "webgpt_comparisons.jsonl"
    train, validation = load_pairs("webgpt", "train", path), load_pairs("webgpt", "validation", path)
    assert not {pair.prompt for pair in train} & {pair.prompt for pair in validation}
    assert load_pairs("webgpt", "validation", path) == validation
    assert load_pairs("webgpt", "validation", path, seed=7) != validation


def test_apps_code_tasks_prompts_tests_and_bad_json_skip(caplog):
    with caplog.at_level(logging.WARNING):
        tasks = load_code_tasks("apps", "train", FIXTURES / "apps.jsonl")
    assert [task.task_id for task in tasks] == ["12", "2437", "4500"]
    standard, call_based, unsolved = tasks
    assert standard.prompt == ("\nQUESTION:\nRead two integers a and b and print their sum.\n\n-----Input-----\n"
                               "One line with a and b.\n\n-----Output-----\nPrint a + b.\n"
                               "Use Standard Input format\nANSWER:\n")
    assert standard.inputs == ["1 2\n", "5 7\n"] and standard.outputs == ["3\n", "12\n"]
    assert standard.fn_name is None and standard.difficulty == "introductory" and len(standard.solutions) == 2
    assert call_based.prompt == ("\nQUESTION:\nWrite a function that returns the largest element of a list.\n"
                                 "class Solution:\n    def largest(self, nums: List[int]) -> int:\n        \n"
                                 "Use Call-Based format\nANSWER:\n")
    assert call_based.fn_name == "largest" and call_based.inputs == [[[1, 5, 2]], [[-3, -1]]]
    assert unsolved.solutions == []
    assert "bad JSON in input_output: 1 (e.g. problem_id 3001)" in caplog.text


def test_apps_sft_pairs_are_prompt_and_first_solution(caplog):
    with caplog.at_level(logging.WARNING):
        pairs = load_pairs("apps", "train", FIXTURES / "apps.jsonl")
    assert [pair.chosen for pair in pairs] == [
        "a, b = map(int, input().split())\nprint(a + b)\n",
        "class Solution:\n    def largest(self, nums):\n        return max(nums)\n",
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
    with caplog.at_level(logging.WARNING):
        pairs = load_pairs("jsonl", "train", FIXTURES / "canonical.jsonl")
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
    assert load_pairs("hh-rlhf", "train", tmp_path / "rows.json") == expected
    assert load_pairs("hh-rlhf", "train", tmp_path / "rows.parquet") == expected


def test_code_task_records_are_code_tasks():
    assert all(isinstance(task, CodeTask) for task in load_code_tasks("apps", "test", FIXTURES / "apps.jsonl"))
