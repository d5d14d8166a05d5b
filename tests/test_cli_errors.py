"""Bad input to a stage ends with one clear line naming the flag, file or row — never a traceback."""
from __future__ import annotations

import pytest

from conftest import one_line_error
from dschat.cli.sft import main as sft_main


def run_stage(argv, capsys) -> str:
    return one_line_error(sft_main, argv, capsys)


@pytest.mark.parametrize("flags, expected", [
    (["--data_name", "jsonl", "--data_path", "/nonexistent/data.jsonl"], "/nonexistent/data.jsonl"),
    (["--data_name", "nosuchset"], "nosuchset"),
    (["--model_name_or_path", "./no/such/model"], "./no/such/model"),
    (["--data_split", "0,0,0"], "0,0,0"),
    (["--data_split", "2,four,4"], "2,four,4"),
], ids=["missing-file", "unknown-dataset", "missing-model", "zero-split", "unparsable-split"])
def test_bad_flags_give_one_line_errors(tmp_path, capsys, flags, expected):
    message = run_stage(["--output_dir", str(tmp_path), "--no_progress_bar"] + flags, capsys)
    assert expected in message


def test_row_missing_a_field_names_file_and_row(tmp_path, capsys):
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "Q: hi\\nA:", "chosen": " hello"}\n{"prompt": "Q: bye\\nA:"}\n')
    message = run_stage(["--output_dir", str(tmp_path / "out"), "--data_name", "jsonl", "--data_path", str(data)],
                        capsys)
    assert "pairs.jsonl" in message and "2" in message and "chosen" in message
