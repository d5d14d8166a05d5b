"""The evaluation scripts' one JSONL reader (evaluation.jsonl) and the four readers built on it: rows numbered as an
editor numbers lines, blank lines skipped, a line that is not JSON named by its row, a missing file named, and a
caller's own check of an earlier row failing before a later bad line is read."""
from __future__ import annotations

import pytest

from evaluation import agreement, judge, length_debias, plots
from evaluation.jsonl import read_jsonl

LINES = ['{"prompt": "p1", "response": "a b", "score": 1.5}', "", "   ",
         '{"prompt": "p2", "response": "c", "score": -2}', '[1, 2]']


def test_rows_are_numbered_as_lines_with_blank_ones_skipped(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    expected = [(number, line) for number, line in enumerate(LINES, 1) if line.strip()]
    got = list(read_jsonl(str(path)))
    assert [number for number, _ in got] == [number for number, _ in expected] == [1, 4, 5]
    assert got[0][1] == {"prompt": "p1", "response": "a b", "score": 1.5} and got[2][1] == [1, 2]


def test_a_missing_file_and_a_line_that_is_not_json_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl: no such file"):
        list(read_jsonl(str(tmp_path / "nowhere.jsonl")))
    path = tmp_path / "cut.jsonl"
    path.write_text('{"score": 1}\n\n{"score": 2\n')
    with pytest.raises(ValueError, match=r"cut.jsonl row 3: not valid JSON$"):
        list(read_jsonl(str(path)))


READERS = {
    "plots": lambda path: plots.read_scores(path),
    "length_debias": lambda path: length_debias.read_length_scores(path, len),
    "judge": lambda path: judge.read_response_rows(path),
    "agreement (RM scores)": lambda path: agreement.read_rm_preferences(path, path),
    "agreement (judge)": lambda path: agreement.read_judge_preferences(path),
    "agreement (human)": lambda path: agreement.read_human_preferences(path),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_evaluation_reader_reads_through_it(tmp_path, reader):
    """The same cut line is reported the same way by each reader; a row missing what the reader needs, before it,
    fails first (rows are read one at a time)."""
    path = tmp_path / "scores.jsonl"
    path.write_text('{"prompt": "p", "response": "r", "score": 1, "verdict": "a", "preferred": "a"}\n\n{"score": \n')
    with pytest.raises(ValueError, match=r"scores.jsonl row 3: not valid JSON$"):
        READERS[reader](str(path))
    path.write_text('{"prompt": "p", "response": "r", "score": 1, "verdict": "a", "preferred": "a"}\n[]\n{"score": \n')
    with pytest.raises(ValueError, match=r"scores.jsonl row 2: (needs|verdict|preferred)"):
        READERS[reader](str(path))
    with pytest.raises(FileNotFoundError, match="gone.jsonl"):
        READERS[reader](str(tmp_path / "gone.jsonl"))
