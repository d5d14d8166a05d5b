"""The README's study figures and sentences cannot drift from the committed report: its tables are the ones
``evaluation.study.report`` renders from ``docs/study/runs.jsonl``, its bullets are the ones
``evaluation.study.findings`` writes from the same runs, and every run of the committed study was made at a clean
commit the runner recorded (``study.sh --verify``, a slow test, checks the code reproduces)."""
import json
import shutil
from pathlib import Path

from evaluation.study.findings import readme_findings, rewrite_readme
from evaluation.study.report import render
from evaluation.study.summaries import by_arm, seed_split
from evaluation.study.tables import confirmation_table, readme_table

ROOT = Path(__file__).resolve().parents[1]


def committed(name):
    path = ROOT / "docs/study" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_readme_study_tables_are_rendered_from_the_committed_runs():
    readme = (ROOT / "README.md").read_text()
    report = (ROOT / "docs/study/README.md").read_text()
    runs = committed("runs.jsonl")
    assert readme_table(runs)
    for table in (readme_table(runs), confirmation_table(runs)):  # the second is empty before the confirmation
        text = "\n".join(table)
        assert text in readme and text in report


def test_the_committed_report_is_what_the_code_renders_from_the_committed_runs(tmp_path, capsys):
    """``python -m evaluation.study_report docs/study/runs.jsonl`` would change no byte of ``docs/study/README.md``
    (the figures are drawn too, but their bytes depend on the plotting library's version, so only their links
    are compared here)."""
    for name in ("runs.jsonl", "study_meta.json", "positions.jsonl"):
        shutil.copy(ROOT / "docs/study" / name, tmp_path / name)
    render(committed("runs.jsonl"), tmp_path)
    assert (tmp_path / "README.md").read_text() == (ROOT / "docs/study/README.md").read_text()
    assert capsys.readouterr().out.rstrip("\n") == (ROOT / "docs/study/README.md").read_text().rstrip("\n")


def test_the_report_leaves_no_placeholder_unfilled():
    """A format field left out of its f-string (``{best}``) would print as it is."""
    import re

    for name in ("docs/study/README.md", "README.md"):
        text = (ROOT / name).read_text()
        section = text[text.index("## What the study shows"):] if name == "README.md" else text
        assert not re.search(r"\{[a-z_]+(\[[^]]*\])?(:[^}]*)?\}", section.split("\n## ", 1)[0] if name == "README.md"
                             else section), name


def test_readme_study_sentences_are_written_from_the_committed_runs():
    readme = (ROOT / "README.md").read_text()
    findings = readme_findings(committed("runs.jsonl"), committed("positions.jsonl"))
    assert len(findings) >= 8
    for line in findings:
        assert line in readme, line[:120]


def test_the_readme_study_section_is_exactly_what_the_generator_writes():
    """No stale bullet or row survives beside the generated ones (``study_findings --readme`` rewrites the
    section's tables and bullets; here it must change nothing), and a stale figure is put right."""
    readme = (ROOT / "README.md").read_text()
    runs, positions = committed("runs.jsonl"), committed("positions.jsonl")
    assert rewrite_readme(readme, runs, positions) == readme
    bullet = readme_findings(runs, positions)[0]
    stale = readme.replace(bullet, bullet + "\n- **A sentence no run supports.**")
    stale = stale.replace(readme_table(runs)[2], readme_table(runs)[2].replace("| 8 |", "| 7 |", 1))
    assert stale != readme and rewrite_readme(stale, runs, positions) == readme


def test_every_run_of_the_committed_study_ran_at_a_clean_commit_the_runner_recorded():
    """Each run names the clean commit it was trained at, and that commit is one the runner's starts in
    ``study_meta.json`` record (a seed set trained in several sittings spans their commits: ``study.sh --verify``
    retrains a confirmation run at HEAD and requires its committed evaluations exactly)."""
    runs = committed("runs.jsonl")
    exploration, confirmation = seed_split(by_arm(runs, "long"))
    assert exploration
    starts = {start["commit"] for start in json.loads((ROOT / "docs/study/study_meta.json").read_text())["starts"]}
    for run in runs:
        assert run.get("commit") in starts and not run["commit"].endswith("+dirty"), (run["arm"], run["seed"])
    exploration_commits = {run["commit"] for run in runs if run["seed"] in exploration}
    assert len(exploration_commits) == 1, exploration_commits
