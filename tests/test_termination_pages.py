"""Each termination rule's page (``docs/termination/RULE.md``) shows the same response cut by that rule, and the
cut is the segmentation viewer's output for the command the page shows, so a picture cannot drift from the code
(issue 41). ``python tests/test_termination_pages.py`` writes the outputs into the pages; the test reruns every
command and compares."""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "termination"
VIEWER = ".venv/bin/python -m dschat.cli.viewer "
BLOCK = re.compile(r"(<!-- viewer: .*? -->\n```bash\n)(.*?)\n```\n\n```text\n(.*?)```\n<!-- /viewer -->", re.S)
"""A generated block: its marker, the viewer command it shows, and that command's output."""


def viewer_blocks(page: str) -> List[Tuple[str, str]]:
    """``(command, shown output)`` of each generated block of a page."""
    return [(command, output) for _, command, output in BLOCK.findall(page)]


def viewer_output(command: str) -> str:
    """What the viewer prints for ``command`` (run in-process from the repository root), or an error naming it."""
    from dschat.cli import viewer

    assert command.startswith(VIEWER), command
    out, err, cwd = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = viewer.main(shlex.split(command[len(VIEWER):]))
    finally:
        os.chdir(cwd)
    if code != 0:
        raise RuntimeError(f"`{command}` failed: {err.getvalue().strip()}")
    return out.getvalue()


def regenerate(page: str) -> str:
    """The page with every generated block's output replaced by the viewer's output for its command."""
    return BLOCK.sub(lambda match: f"{match[1]}{match[2]}\n```\n\n```text\n{viewer_output(match[2])}```\n"
                                   "<!-- /viewer -->", page)


def rule_pages() -> dict:
    """Registered rule name -> its page's text (the index page excluded)."""
    return {path.stem: path.read_text() for path in sorted(PAGES.glob("*.md")) if path.stem != "index"}


def test_every_registered_rule_has_a_page_showing_the_shared_response():
    from dschat.rlhf.macro_action.termination import available_terminations
    from dschat.rlhf.macro_action.termination.registry import rule_modules

    rules = {name for _, name in rule_modules().values()}
    assert rules and rules <= set(available_terminations())
    pages = rule_pages()
    assert set(pages) == rules
    for rule, page in pages.items():
        (command, _), = viewer_blocks(page)
        argv = shlex.split(command)
        assert argv[argv.index("--termination") + 1] == rule, rule
        assert argv[argv.index("--file") + 1] == "docs/examples/response.txt", rule  # one response for all


def test_each_picture_is_the_viewers_output_for_its_command():
    for rule, page in rule_pages().items():
        assert regenerate(page) == page, f"docs/termination/{rule}.md: run python tests/test_termination_pages.py"


def test_a_stale_picture_is_put_right():
    page = rule_pages()["fixed"]
    (command, output), = viewer_blocks(page)
    stale = page.replace(output, output.replace("@@", "", 1))
    assert stale != page and regenerate(stale) == page


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for path in sorted(PAGES.glob("*.md")):
        path.write_text(regenerate(path.read_text()))
