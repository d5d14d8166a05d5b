"""Anthropic HH-RLHF preferences, as ``Dahoas/full-hh-rlhf``.

Hub row schema: ``{"prompt", "response", "chosen", "rejected"}``. ``prompt`` is already the dialogue in the
``\n\nHuman: ...\n\nAssistant:`` format (single or multi turn) and is kept verbatim; ``chosen`` and
``rejected`` are the final assistant turns, stored with one leading space (``response`` duplicates
``chosen`` and is not used). Splits: ``train``; ``validation`` and ``test`` both read the hub ``test``
split. Rows with an empty response are skipped and counted.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ..formats import spaced_response
from ..records import HubSource, read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import convert_rows, nonempty_response

logger = logging.getLogger(__name__)

SOURCE = HubSource("Dahoas/full-hh-rlhf", splits={"train": "train", "validation": "test", "test": "test"})
SCHEMA = "full-hh-rlhf rows: prompt, response, chosen, rejected"


def load_hh_rlhf_pairs(split: str = "train", data_path: Optional[str] = None) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path)
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
