"""The README's study figures cannot drift from the committed report: its table is the one
``evaluation.study_report.readme_table`` renders from ``docs/study/runs.jsonl``, and every run of the committed
study was made at one clean commit (``study.sh --verify``, a slow test, checks that commit's code reproduces)."""
import json
from pathlib import Path

from evaluation.study_report import readme_table

ROOT = Path(__file__).resolve().parents[1]


def committed_runs():
    return [json.loads(line) for line in (ROOT / "docs/study/runs.jsonl").read_text().splitlines() if line.strip()]


def test_readme_study_table_is_rendered_from_the_committed_runs():
    readme = (ROOT / "README.md").read_text()
    table = "\n".join(readme_table(committed_runs()))
    assert table in readme
    report = (ROOT / "docs/study/README.md").read_text()
    assert table in report


def test_the_committed_study_ran_at_one_clean_commit():
    commits = {run.get("commit") for run in committed_runs()}
    assert len(commits) == 1 and None not in commits and not next(iter(commits)).endswith("+dirty"), commits
