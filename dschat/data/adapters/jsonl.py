"""Local preference data in the canonical schema, one JSON object per line::

    {"prompt": str, "chosen": str, "rejected": str | null}     ("rejected" optional)

The texts are used verbatim (no template is applied): ``prompt`` is the full formatted prompt and the
responses are what follows it (start them with a space for natural language); no end-of-sequence token
(tokenisation appends the tokenizer's own). Rows without ``rejected`` are SFT/PPO-only data (the reward model
and DPO refuse them, naming file and row). ``data_path``
is required: a file (JSON, JSONL or parquet, rows in this schema) or a directory holding ``{split}.jsonl``.
A single file without ``eval_data_path`` is split: the last 5% of a seeded shuffle are the evaluation rows
(:mod:`dschat.data.holdout`), so evaluation never reads training rows.
A missing or mistyped field is a DataError naming the row; an empty response a counted, logged skip.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ..errors import row_error
from ..hub import DatasetSource
from ..options import DataOptions
from ..records import read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import convert_rows, nonempty_response

logger = logging.getLogger(__name__)

SCHEMA = 'canonical rows: {"prompt": str, "chosen": str, "rejected": str (optional)}'
SOURCE = DatasetSource("jsonl", splits={split: split for split in ("train", "validation", "test")})


def load_jsonl_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                     options: DataOptions = DataOptions()) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path, eval_data_path, options.eval_holdout)
    return convert_rows(rows, source, canonical_pair, logger)


def canonical_pair(record: Dict[str, Any], source: str, number: int) -> PreferencePair:
    prompt = require_field(record, "prompt", str, source, number, SCHEMA)
    chosen = require_field(record, "chosen", str, source, number, SCHEMA)
    rejected = record.get("rejected")
    if rejected is not None and not isinstance(rejected, str):
        raise row_error(source, number, f"field 'rejected' should be str or null, got {type(rejected).__name__}")
    return PreferencePair(
        prompt=prompt,
        chosen=nonempty_response(chosen),
        rejected=None if rejected is None else nonempty_response(rejected),
        origin=f"{source}, row {number}",
    )


register(DatasetAdapter(name="jsonl", load_pairs=load_jsonl_pairs))
