"""Bad input: a one-line DataError naming the file, row and expectation, or a counted, logged skip."""
import json
import logging
from pathlib import Path

import pytest

from dschat.data import DataError, load_code_tasks, load_pairs, pairs_for_phase, phase_indices

FIXTURES = Path(__file__).parent / "fixtures" / "data"


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def one_line_error(call) -> str:
    with pytest.raises(DataError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def fixture_rows(name):
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def all_rows_as_train(load, name, path):
    """Every row of ``path`` as training rows (an evaluation file is given, so nothing is held out)."""
    return load(name, "train", path, eval_data_path=path)


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    assert one_line_error(lambda: load_pairs("tldr", "train", missing)) == f"{missing}: no such file or directory"


def test_directory_without_split_file(tmp_path):
    message = one_line_error(lambda: load_pairs("jsonl", "test", tmp_path))
    assert message.startswith(f"{tmp_path}: no file for split 'test'")


def test_unknown_dataset_lists_known_ones():
    message = one_line_error(lambda: load_pairs("imdb", "train"))
    assert message == ("unknown dataset 'imdb'; known datasets: apps, arithmetic, gsm8k, hh-rlhf, humaneval, jsonl, "
                       "math, synthetic, synthetic-long, tldr, webgpt")


def test_unknown_split_lists_known_ones():
    message = one_line_error(lambda: load_pairs("tldr", "dev", FIXTURES / "tldr_comparisons.jsonl"))
    assert message == "openai/summarize_from_feedback: unknown split 'dev'; known splits: train, validation"


@pytest.mark.parametrize("name, fixture, field", [
    ("tldr", "tldr_comparisons.jsonl", "summaries"),
    ("hh-rlhf", "hh_rlhf.jsonl", "chosen"),
    ("webgpt", "webgpt_comparisons.jsonl", "score_1"),
    ("jsonl", "canonical.jsonl", "prompt"),
])
def test_row_missing_a_field_names_file_row_and_schema(tmp_path, name, fixture, field):
    rows = fixture_rows(fixture)
    del rows[1][field]
    path = write_jsonl(tmp_path / fixture, rows)
    message = one_line_error(lambda: all_rows_as_train(load_pairs, name, path))
    assert message.startswith(f"{path}, row 2: missing field '{field}' (expected ")


def test_apps_row_missing_field(tmp_path):
    rows = fixture_rows("apps.jsonl")
    del rows[0]["question"]
    path = write_jsonl(tmp_path / "apps.jsonl", rows)
    assert one_line_error(lambda: all_rows_as_train(load_code_tasks, "apps", path)).startswith(
        f"{path}, row 1: missing field 'question'")


def test_wrong_field_type(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"prompt": "p", "chosen": 3}])
    assert one_line_error(lambda: load_pairs("jsonl", "train", path)) == (
        f"{path}, row 1: field 'chosen' should be str, got int")


def test_tldr_row_with_neither_post_nor_article(tmp_path):
    rows = fixture_rows("tldr_comparisons.jsonl")
    rows[0]["info"]["post"] = None
    path = write_jsonl(tmp_path / "tldr.jsonl", rows)
    assert "row 1: info has neither 'post'" in one_line_error(lambda: all_rows_as_train(load_pairs, "tldr", path))


def test_invalid_json_line_names_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "p", "chosen": " c"}\n\n{"prompt": "p",\n')
    assert one_line_error(lambda: load_pairs("jsonl", "train", path)).startswith(f"{path}, row 3: invalid JSON")


def test_row_that_is_not_an_object(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[{"prompt": "p", "chosen": " c"}, ["p", " c"]]')
    assert one_line_error(lambda: load_pairs("jsonl", "train", path)) == (
        f"{path}, row 2: expected a JSON object, got list")


def test_unsupported_file_type(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("prompt,chosen\n")
    assert "unsupported file type" in one_line_error(lambda: load_pairs("jsonl", "train", path))


def test_jsonl_needs_a_data_path():
    assert "dataset 'jsonl' needs data_path" in one_line_error(lambda: load_pairs("jsonl", "train"))


def test_wrong_kind_of_dataset():
    assert "has code tasks only; use load_code_tasks" in one_line_error(lambda: load_pairs("humaneval", "test"))
    assert "has no code tasks (what --reward code runs); code datasets: apps, humaneval" in one_line_error(
        lambda: load_code_tasks("tldr", "train"))


def test_apps_json_of_the_wrong_shape_is_an_error(tmp_path):
    rows = fixture_rows("apps.jsonl")
    rows[0]["input_output"] = json.dumps([1, 2])
    path = write_jsonl(tmp_path / "apps.jsonl", rows)
    assert one_line_error(lambda: all_rows_as_train(load_code_tasks, "apps", path)) == (
        f"{path}, row 1: input_output should decode to a JSON dict, got list (problem_id 12)")


def test_apps_bad_solutions_json_is_a_counted_skip(tmp_path, caplog):
    rows = fixture_rows("apps.jsonl")
    rows[1]["solutions"] = "[\"print(1)\""
    path = write_jsonl(tmp_path / "apps.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        tasks = all_rows_as_train(load_code_tasks, "apps", path)
    assert [task.task_id for task in tasks] == ["12", "4500"]
    assert "skipped 2 of 4 rows: bad JSON in input_output: 1 (e.g. problem_id 3001); " \
           "bad JSON in solutions: 1 (e.g. problem_id 2437)" in caplog.text


@pytest.mark.parametrize("data_split, problem", [
    ("2,4", "expected 3 weights"),
    ("2,4,x", "expected 3 comma-separated numbers"),
    ("", "expected 3 comma-separated numbers"),
    ("0,0,0", "sum to a positive number"),
    ("2,-1,4", "non-negative"),
    ("2,nan,4", "finite"),
])
def test_bad_data_split(data_split, problem):
    message = one_line_error(lambda: phase_indices(10, data_split, 0))
    assert message.startswith(f"data_split {data_split!r}: ") and problem in message


def test_bad_phase():
    assert "expected 0 (SFT), 1 (reward model) or 2 (PPO)" in one_line_error(
        lambda: pairs_for_phase("synthetic", 3))


def test_hub_unreachable_is_one_line_naming_the_download_command(tmp_path):
    """Offline with a cold HF cache: one line naming the pinned file and how to fetch it, no traceback."""
    import os
    import subprocess
    import sys

    code = ("from dschat.data import DataError, load_pairs\n"
            "try:\n    load_pairs('tldr', 'validation')\nexcept DataError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)})
    message = result.stdout.strip()
    assert "\n" not in message and "Traceback" not in result.stderr
    assert message == (
        "openai/summarize_from_feedback@195fc27:comparisons/validation/0000.parquet: cannot reach the hub and the "
        "file is not in the HF cache; on a machine with network run `hf download openai/summarize_from_feedback "
        "comparisons/validation/0000.parquet --repo-type dataset --revision 195fc27ff714b2aff32ab8aba9bbee1d35663700 "
        "--local-dir DIR` and pass --data_path DIR")
