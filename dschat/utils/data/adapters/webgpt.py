"""WebGPT comparisons: ``openai/webgpt_comparisons``.

Hub row schema (one comparison; only ``train`` exists)::

    {"question": {"dataset", "id", "full_text"},
     "quotes_0": {"title": [...], "extract": [...]}, "answer_0": str, "tokens_0": [...], "score_0": float,
     "quotes_1": {...}, "answer_1": str, "tokens_1": [...], "score_1": float}

Prompt: the human-assistant template around ``question.full_text``. Responses: the answers with citation
markers (``[1]``, ``[1, 2]``, ``[2-4]``) removed, one leading space. The higher-scored answer is chosen;
ties (equal scores, about a quarter of the rows) are dropped, counted and logged, as are empty answers.

Since the hub has no validation split, the rows are split 95/5 into ``train`` / ``validation`` by a seeded
permutation of row positions (``validation_fraction``, ``seed``), before ties are dropped, so a row's split
does not depend on how other rows are filtered.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Optional

import numpy as np

from ..formats import human_assistant_prompt, spaced_response
from ..records import HubSource, Row, read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import SkipRow, convert_rows, nonempty_response

logger = logging.getLogger(__name__)

SOURCE = HubSource("openai/webgpt_comparisons", splits={"train": "train", "validation": "train"})
SCHEMA = "webgpt_comparisons rows: question{full_text}, answer_0, score_0, answer_1, score_1"
VALIDATION_FRACTION = 0.05
VALIDATION_SEED = 1234
CITATION = re.compile(r"\s*\[\d+(?:\s*[,\u2013-]\s*\d+)*\]")


def load_webgpt_pairs(split: str = "train", data_path: Optional[str] = None,
                      validation_fraction: float = VALIDATION_FRACTION,
                      seed: int = VALIDATION_SEED) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path)
    selected = rows_of_split(rows, split, validation_fraction, seed)
    return convert_rows(selected, source, webgpt_pair, logger)


def rows_of_split(rows: List[Row], split: str, validation_fraction: float, seed: int) -> List[Row]:
    """The seeded ``validation_fraction`` of rows for ``validation``, the rest for ``train``, in file order."""
    count = len(rows)
    validation_count = round(count * validation_fraction)
    if count > 1 and validation_fraction > 0:
        validation_count = max(1, validation_count)
    validation_positions = set(np.random.RandomState(seed).permutation(count)[:validation_count].tolist())
    want_validation = split == "validation"
    return [row for position, row in enumerate(rows) if (position in validation_positions) == want_validation]


def strip_citations(text: str) -> str:
    return CITATION.sub("", text)


def webgpt_pair(record: Dict[str, Any], source: str, number: int) -> PreferencePair:
    question = require_field(record, "question", dict, source, number, SCHEMA)
    full_text = require_field(question, "full_text", str, source, number, SCHEMA)
    answers = [require_field(record, f"answer_{k}", str, source, number, SCHEMA) for k in (0, 1)]
    scores = [require_field(record, f"score_{k}", (int, float), source, number, SCHEMA) for k in (0, 1)]
    if scores[0] == scores[1]:
        raise SkipRow("tie (equal scores)")
    better = 0 if scores[0] > scores[1] else 1
    return PreferencePair(
        prompt=human_assistant_prompt(full_text),
        chosen=nonempty_response(spaced_response(strip_citations(answers[better]))),
        rejected=nonempty_response(spaced_response(strip_citations(answers[1 - better]))),
    )


register(DatasetAdapter(name="webgpt", load_pairs=load_webgpt_pairs))
