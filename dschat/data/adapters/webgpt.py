"""WebGPT comparisons: ``openai/webgpt_comparisons`` (19,578 rows, hub split ``train`` only).

Read from the hub's Parquet export (the repository's loading script no longer runs), file
``default/train/0000.parquet`` at commit :data:`PARQUET_REVISION` of ``refs/convert/parquet``. Row schema::

    {"question": {"dataset", "id", "full_text"},
     "quotes_0": {"title": [...], "extract": [...]}, "answer_0": str, "tokens_0": [...], "score_0": float,
     "quotes_1": {...}, "answer_1": str, "tokens_1": [...], "score_1": float}

As the authors' code (DeepSpeed-Chat) builds it, so Table 4's 18.5k / 979 rows come out:

* splits: ``validation`` is the last 5% of a seeded shuffle of the rows, ``train`` the rest
  (:mod:`dschat.data.holdout`; ``--eval_holdout``), split before any row is converted;
* prompt: `` Human: {question.full_text} Assistant:`` (``--webgpt_template hh`` for the HH-RLHF template);
* chosen: answer 0 when ``score_0 >= score_1``, else answer 1, so ties (about a quarter of the rows) are
  kept with answer 0 chosen (``--webgpt_ties drop`` leaves them out, counted and logged);
* responses: citation markers (``[1]``, ``[1, 2]``, ``[2-4]``) removed, one leading space. DeepSpeed-Chat
  removes every bracketed or parenthesised span instead, which also deletes ordinary parentheses; only
  citation markers are removed here. Rows with an empty answer are skipped, counted and logged.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Optional

from ..formats import dschat_prompt, human_assistant_prompt, spaced_response
from ..hub import DatasetSource
from ..options import DataOptions
from ..records import read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import SkipRow, convert_rows, nonempty_response

logger = logging.getLogger(__name__)

# refs/convert/parquet head "Delete old duckdb index files" (2024-03-08); default/train/0000.parquet last
# changed in 3c2c00056b9a5d436e01241897a3d8842ccb3e75 (2023-08-17). Read from the hub's commit pages offline.
PARQUET_REVISION = "8193c7bffcb63ae55b88bd85647be4b77ca8cab2"
SOURCE = DatasetSource("openai/webgpt_comparisons", splits={"train": "train", "validation": "train"},
                       repo="openai/webgpt_comparisons", revision=PARQUET_REVISION,
                       files={"train": "default/train/0000.parquet"}, eval_held_out=True)
SCHEMA = "webgpt_comparisons rows: question{full_text}, answer_0, score_0, answer_1, score_1"
CITATION = re.compile(r"\s*\[\d+(?:\s*[,\u2013-]\s*\d+)*\]")
TEMPLATES = {"dschat": dschat_prompt, "hh": human_assistant_prompt}


def load_webgpt_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                      options: DataOptions = DataOptions()) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path, eval_data_path, options.eval_holdout)
    return convert_rows(rows, source, lambda record, label, number: webgpt_pair(record, label, number, options),
                        logger)


def strip_citations(text: str) -> str:
    return CITATION.sub("", text)


def webgpt_pair(record: Dict[str, Any], source: str, number: int,
                options: DataOptions = DataOptions()) -> PreferencePair:
    question = require_field(record, "question", dict, source, number, SCHEMA)
    full_text = require_field(question, "full_text", str, source, number, SCHEMA)
    answers = [require_field(record, f"answer_{k}", str, source, number, SCHEMA) for k in (0, 1)]
    scores = [require_field(record, f"score_{k}", (int, float), source, number, SCHEMA) for k in (0, 1)]
    if scores[0] == scores[1] and options.webgpt_ties == "drop":
        raise SkipRow("tie (equal scores; --webgpt_ties drop)")
    better = 0 if scores[0] >= scores[1] else 1
    return PreferencePair(
        prompt=TEMPLATES[options.webgpt_template](full_text),
        chosen=nonempty_response(spaced_response(strip_citations(answers[better]))),
        rejected=nonempty_response(spaced_response(strip_citations(answers[1 - better]))),
    )


register(DatasetAdapter(name="webgpt", load_pairs=load_webgpt_pairs))
