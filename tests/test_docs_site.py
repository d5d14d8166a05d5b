"""The documentation site builds offline with ``mkdocs build --strict`` (what CI runs, issue 41): every page is in
the nav, every link between pages and every snippet of the README resolves, and every module the API reference
names is found; and the strict build does fail on a broken link or a missing API target."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the site whose ``mkdocs.yml`` is in ``root``, into ``site``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    result = build(ROOT, out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_the_site_builds_strictly_with_the_api_reference_and_the_readme_snippets(site):
    api = (site / "api" / "macro_action" / "index.html").read_text()
    for name in ("advantages.compute_macro_advantages", "gae.macro_gae", "losses.policy_loss",
                 "correction.importance_weights", "termination.ngram.ngram_segments"):
        assert f'id="dschat.rlhf.macro_action.{name}"' in api, name
    assert ":func:" not in api and ":mod:" not in api  # reStructuredText roles shown as code (docs/_hooks)
    for page, module in (("rollout", "dschat.rlhf.rollout.weights"), ("rewards", "dschat.rewards.sandbox"),
                         ("evaluation", "evaluation.study.findings")):
        assert f'id="{module}"' in (site / "api" / page / "index.html").read_text(), module
    demo_row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| mappo |"))
    started = (site / "getting-started" / "index.html").read_text()
    assert demo_row.split("|")[2].strip().split(";")[0] in started  # the README's demo table, included
    assert "@@" in (site / "termination" / "fixed" / "index.html").read_text()


@pytest.fixture()
def scratch(tmp_path):
    """A copy of the site's sources (``docs/`` copied, the rest linked) that a test may break."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    for name in ("mkdocs.yml", "README.md", "dschat", "evaluation"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def test_a_broken_link_fails_the_build(scratch):
    page = scratch / "docs" / "baselines.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    result = build(scratch, scratch / "site")
    assert result.returncode != 0 and "baselines.md" in result.stderr and "no-such-page.md" in result.stderr


def test_a_missing_api_target_fails_the_build(scratch):
    page = scratch / "docs" / "api" / "rollout.md"
    page.write_text(page.read_text() + "\n::: dschat.rlhf.rollout.no_such_module\n")
    result = build(scratch, scratch / "site")
    assert result.returncode != 0 and "dschat.rlhf.rollout.no_such_module" in result.stderr


def test_the_readme_is_a_front_page_whose_links_resolve():
    """The README stays the short front page (issue 41: at most 250 lines), and every page it links to exists
    (``mkdocs build`` checks the pages' links, not the README's)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    targets = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(targets) >= 15
    for target in targets:
        assert (ROOT / target).is_file(), target
