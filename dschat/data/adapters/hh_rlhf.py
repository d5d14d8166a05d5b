"""Anthropic HH-RLHF preferences, as ``Dahoas/full-hh-rlhf`` (the authors' DeepSpeed-Chat dataset).

Read from the repository's Parquet files at commit :data:`REVISION`: ``data/train-00000-of-00001-*.parquet``
and ``data/test-00000-of-00001-*.parquet`` (Table 4: 112k / 12.5k rows).

Row schema: ``{"prompt", "response", "chosen", "rejected"}``. ``prompt`` is already the dialogue in the
``\n\nHuman: ...\n\nAssistant:`` format (single or multi turn) and is kept verbatim; ``chosen`` and
``rejected`` are the final assistant turns, stored with one leading space (``response`` duplicates
``chosen`` and is not used). Splits: ``train``; ``validation`` and ``test`` both read the hub ``test``
split (a flat local directory may hold ``train.jsonl`` and ``test.jsonl``). Rows with an empty response are
skipped and counted.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ..formats import spaced_response
from ..hub import DatasetSource
from ..options import DataOptions
from ..records import read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import convert_rows, nonempty_response

logger = logging.getLogger(__name__)

# main: "Upload dataset_infos.json", the commit whose data/ holds these two files (read from the hub's pages
# offline).
REVISION = "c87c4d53738e51c7ca4ad83b04f84cfd9c1dee42"
SOURCE = DatasetSource("Dahoas/full-hh-rlhf", splits={"train": "train", "validation": "test", "test": "test"},
                       repo="Dahoas/full-hh-rlhf", revision=REVISION,
                       files={"train": "data/train-00000-of-00001-8349d0765e6718df.parquet",
                              "test": "data/test-00000-of-00001-ec71e9262143a91c.parquet"})
SCHEMA = "full-hh-rlhf rows: prompt, response, chosen, rejected"


def load_hh_rlhf_pairs(split: str = "train", data_path: Optional[str] = None,
                       eval_data_path: Optional[str] = None,
                       options: DataOptions = DataOptions()) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path, eval_data_path, options.eval_holdout)
    return convert_rows(rows, source, hh_rlhf_pair, logger)


def hh_rlhf_pair(record: Dict[str, Any], source: str, number: int) -> PreferencePair:
    prompt = require_field(record, "prompt", str, source, number, SCHEMA)
    chosen = require_field(record, "chosen", str, source, number, SCHEMA)
    rejected = require_field(record, "rejected", str, source, number, SCHEMA)
    return PreferencePair(
        prompt=prompt,
        chosen=nonempty_response(spaced_response(chosen)),
        rejected=nonempty_response(spaced_response(rejected)),
    )


register(DatasetAdapter(name="hh-rlhf", load_pairs=load_hh_rlhf_pairs))
