"""docs/reasoning.md's pictures of one arithmetic solution cut by each termination rule are the segmentation
viewer's output for the commands the page shows (``python tests/test_reasoning_docs.py`` writes them), and every
registered rule has one."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from test_termination_pages import regenerate, viewer_blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reasoning.md"


def test_one_picture_per_rule_each_the_viewers_output():
    from dschat.rlhf.macro_action.termination.registry import rule_modules

    page = PAGE.read_text()
    shown = [shlex.split(command) for command, _ in viewer_blocks(page)]
    assert sorted(a[a.index("--termination") + 1] for a in shown) == sorted({n for _, n in rule_modules().values()})
    assert regenerate(page) == page, "docs/reasoning.md: run python tests/test_reasoning_docs.py"


if __name__ == "__main__":
    sys.path.insert(0, str(PAGE.parents[1]))
    PAGE.write_text(regenerate(PAGE.read_text()))
