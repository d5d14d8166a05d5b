"""The docs' commands as a new user pastes them right after ``bash scripts/demo.sh``: one interpreter spelling,
``.venv/bin/python -m`` (the ``.venv`` both README commands create, nothing to activate; docs/getting-started.md
says why), the viewer reading the model the demo trains, and the example program citing a section that exists."""
import ast
import glob
import os
import re

from conftest import ROOT

BARE_PYTHON = re.compile(r"(?<![\w/.\-])python -m ")
GENERATED = ("docs/study/", "docs/study-findings.md")
"""Pages written by the study's generator (``evaluation/study``), whose templates keep their own spelling."""


def hand_written_pages() -> list:
    pages = ["README.md"] + sorted(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "docs", "**",
                                                                                                  "*.md"), recursive=True))
    return [page for page in pages if not page.startswith(GENERATED)]


def test_every_page_runs_python_from_the_venv():
    offenders = [f"{page}:{number}" for page in hand_written_pages()
                 for number, line in enumerate(open(os.path.join(ROOT, page), encoding="utf-8"), start=1)
                 if BARE_PYTHON.search(line)]
    assert offenders == []


def test_the_viewer_reads_the_model_the_demo_trains():
    """docs/macro-actions.md's viewer commands name ``--model`` the SFT folder scripts/demo.sh writes by default."""
    with open(os.path.join(ROOT, "scripts", "demo.sh")) as handle:
        demo = handle.read()
    default = re.search(r'OUT="\$\{DEMO_DIR:-([^}]+)\}"', demo).group(1)
    assert '--output_dir "$OUT/sft"' in demo
    with open(os.path.join(ROOT, "docs", "macro-actions.md")) as handle:
        models = re.findall(r"dschat\.cli\.viewer .*--model (\S+)", handle.read())
    assert models and set(models) == {f"{default}/sft"}


def test_the_example_program_cites_a_section_that_exists():
    """docs/examples/solution.py names the page and sentence that show its command, and the page shows it."""
    with open(os.path.join(ROOT, "docs", "examples", "solution.py")) as handle:
        doc = ast.get_docstring(ast.parse(handle.read()))
    page, phrase = re.search(r'\((\S+\.md),\s+"([^"]+)"\)', doc).groups()
    with open(os.path.join(ROOT, page)) as handle:
        text = handle.read()
    command = next(line.strip() for line in doc.splitlines() if "dschat.cli.viewer" in line)
    assert phrase in text and command in text
