"""docs/reasoning.md's pictures of one arithmetic solution cut by each termination rule are the segmentation
viewer's output for the commands the page shows (``python tests/test_reasoning_docs.py`` writes them), and every
registered rule has one."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from test_termination_pages import regenerate, viewer_blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reasoning.md"


def test_one_picture_per_rule_each_the_viewers_output():
    from dschat.rlhf.macro_action.termination.registry import rule_modules

    page = PAGE.read_text()
    shown = [shlex.split(command) for command, _ in viewer_blocks(page)]
    assert sorted(a[a.index("--termination") + 1] for a in shown) == sorted({n for _, n in rule_modules().values()})
    assert regenerate(page) == page, "docs/reasoning.md: run python tests/test_reasoning_docs.py"


def test_the_sft_models_figures_are_the_committed_evaluations():
    """The fourth version's row of the SFT table is ``docs/study/reasoning-sft.json`` (the output of the page's
    ``evaluation.reasoning`` command, with its machine and load), formatted here."""
    path = PAGE.parents[0] / "study" / "reasoning-sft.json"
    if not path.is_file():
        pytest.skip("no SFT evaluation committed")
    figures, page = json.loads(path.read_text()), PAGE.read_text()
    n, right = figures["problems"], round(figures["accuracy"] * figures["problems"])
    for text in (f"{right} of {n} ({figures['accuracy']:.1%})", f"{figures['pass@1']:.1%} / {figures['pass@4']:.1%}",
                 f"{figures['right_answers_with_a_wrong_step']} of {right}", f"{figures['steps_right']:.1%}",
                 f"{figures['chains_right']:.1%}", figures["machine"][len("machine: "):], f"load {figures['load']:.1f}"):
        assert text in " ".join(page.split()), text


def test_the_verdicts_on_the_page_and_in_the_readme_are_the_committed_runs():
    """Once the comparison's runs are committed, the page's verdict table and the README's line are what
    ``evaluation.reasoning_comparison`` computes from them (a partial set says so)."""
    from evaluation.reasoning_comparison import read_runs, readme_line, verdict_lines

    path = PAGE.parents[0] / "study" / "reasoning-amendment-3.jsonl"
    if not path.is_file():
        pytest.skip("no runs committed")
    runs = read_runs(str(path))
    assert "\n".join(verdict_lines(runs)) in PAGE.read_text()
    assert "](study/reasoning.png)" in PAGE.read_text() and (PAGE.parents[0] / "study" / "reasoning.png").is_file()
    assert readme_line(runs) in (PAGE.parents[1] / "README.md").read_text().splitlines()


if __name__ == "__main__":
    sys.path.insert(0, str(PAGE.parents[1]))
    PAGE.write_text(regenerate(PAGE.read_text()))
