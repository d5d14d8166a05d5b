"""The study page's figures and sentences (``docs/study-findings.md``) and the README's headline cannot drift from
the committed report: the page's tables are the ones ``evaluation.study.report`` renders from
``docs/study/runs.jsonl``, its bullets are the ones ``evaluation.study.findings`` writes from the same runs (``--readme
docs/study-findings.md`` rewrites them), the README's headline sentences are the bold leads of those bullets, and
every run of the committed study was made at a clean commit the runner recorded (``study.sh --verify``, a slow
test, checks the code reproduces)."""
import json
import re
import shutil
from pathlib import Path

from evaluation.study.findings import README_SECTION, readme_findings, rewrite_readme
from evaluation.study.report import render
from evaluation.study.summaries import by_arm, seed_split
from evaluation.study.tables import confirmation_table, readme_table

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "study-findings.md"
"""The page holding the study section the generator rewrites."""


def committed(name):
    path = ROOT / "docs/study" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def beside():
    """What the findings read beside runs.jsonl: the machine reruns (none until filed) and the study's notes."""
    return committed("machine_reruns.jsonl"), json.loads((ROOT / "docs/study/study_meta.json").read_text())


def test_study_page_tables_are_rendered_from_the_committed_runs():
    page = PAGE.read_text()
    report = (ROOT / "docs/study/README.md").read_text()
    runs = committed("runs.jsonl")
    assert readme_table(runs)
    for table in (readme_table(runs), confirmation_table(runs)):  # the second is empty before the confirmation
        text = "\n".join(table)
        assert text in page and text in report


def test_the_committed_report_is_what_the_code_renders_from_the_committed_runs(tmp_path, capsys):
    """``python -m evaluation.study_report docs/study/runs.jsonl`` would change no byte of ``docs/study/README.md``
    (the figures are drawn too, but their bytes depend on the plotting library's version, so only their links
    are compared here)."""
    (tmp_path / "study").mkdir()
    (tmp_path / "async").mkdir()
    for name in ("runs.jsonl", "study_meta.json", "positions.jsonl", "machine_reruns.jsonl", "unseen_seeds.jsonl"):
        if (ROOT / "docs/study" / name).is_file():  # the machine reruns: once filed
            shutil.copy(ROOT / "docs/study" / name, tmp_path / "study" / name)
    shutil.copy(ROOT / "docs/async/runs.jsonl", tmp_path / "async/runs.jsonl")
    render(committed("runs.jsonl"), tmp_path / "study")
    mine = (ROOT / "docs/study/README.md").read_text()
    assert without_history((tmp_path / "study/README.md").read_text()) == without_history(mine)
    assert without_history(capsys.readouterr().out.rstrip("\n")) == without_history(mine.rstrip("\n"))


def without_history(text):
    """The report less its order of decisions, which git generates up to the commit it is rendered at (so the
    committed one ends where its own commit begins; ``tests/test_study_history.py`` checks it)."""
    start = text.index("#### Order of decisions (generated from git)")
    end = text.index("\n#", start + 10)
    return text[:start] + text[end:]


def test_the_report_leaves_no_placeholder_unfilled():
    """A format field left out of its f-string (``{best}``) would print as it is."""
    import re

    for path in (ROOT / "docs/study/README.md", PAGE):
        text = path.read_text()
        section = text[text.index("## What the study shows"):] if path == PAGE else text
        assert not re.search(r"\{[a-z_]+(\[[^]]*\])?(:[^}]*)?\}", section.split("\n## ", 1)[0] if path == PAGE
                             else section), path


def test_study_page_sentences_are_written_from_the_committed_runs():
    page = PAGE.read_text()
    findings = readme_findings(committed("runs.jsonl"), committed("positions.jsonl"), *beside())
    assert len(findings) >= 8
    for line in findings:
        assert line in page, line[:120]


def test_the_study_page_section_is_exactly_what_the_generator_writes():
    """No stale bullet or row survives beside the generated ones (``study_findings --readme docs/study-findings.md``
    rewrites the section's tables and bullets; here it must change nothing), and a stale figure is put right."""
    page = PAGE.read_text()
    runs, positions = committed("runs.jsonl"), committed("positions.jsonl")
    assert rewrite_readme(page, runs, positions, *beside()) == page
    bullet = readme_findings(runs, positions, *beside())[0]
    stale = page.replace(bullet, bullet + "\n- **A sentence no run supports.**")
    stale = stale.replace(readme_table(runs)[2], readme_table(runs)[2].replace("| 8 |", "| 7 |", 1))
    assert stale != page and rewrite_readme(stale, runs, positions, *beside()) == page


def test_the_readme_headline_is_the_generated_findings_bold_leads():
    """Each bold sentence of the README's study section opens one of the generated bullets (a stale headline fails
    here once ``study_findings --readme docs/study-findings.md`` has rewritten the page)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(README_SECTION):].split("\n## ")[0]
    headline = re.findall(r"^- \*\*(.+?)\*\*", section, re.M)
    leads = {re.match(r"- \*\*(.+?)\*\*", line).group(1)
             for line in readme_findings(committed("runs.jsonl"), committed("positions.jsonl"), *beside())}
    assert headline
    for sentence in headline:
        assert sentence in leads, sentence


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
