"""The one reader of JSON Lines files for the evaluation scripts (score files, response files, judge outputs).

Each caller checks its own fields and says what a row needs; this module owns what every such file shares: a
missing file is a ``FileNotFoundError`` naming it, blank lines are skipped, rows are numbered as an editor numbers
lines (blank ones counted), and a line that is not JSON is a ``ValueError`` naming its row. Rows come one at a time,
so a caller's own check of row 2 fails before a bad line further down is read.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterator, Tuple


def read_jsonl(path: str) -> Iterator[Tuple[int, Any]]:
    """``(row number, parsed line)`` for every non-blank line of ``path``, in order."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise ValueError(f"{path} row {number}: not valid JSON") from None
            yield number, row
