"""GSM8K grade-school math word problems (Cobbe et al., 2021): ``openai/gsm8k``, config ``main``.

Read from the repository's Parquet files at commit :data:`REVISION`: ``main/train-00000-of-00001.parquet``
(7,473 problems) and ``main/test-00000-of-00001.parquet`` (1,319); ``validation`` and ``test`` read the hub ``test``
split. Row schema: ``{"question": str, "answer": str}``; ``answer`` is the worked solution, one step a line with
calculator annotations ``<<48/2=24>>``, and a last line ``#### 72`` holding the final answer.

Each row becomes a pair for SFT and for ``--reward verifier`` (no ``rejected``)::

    prompt:  "Question: {question}\\nSolution:"
    chosen:  " {steps without the <<...>> annotations}\\nAnswer: {final answer}"

so responses end in the ``Answer:`` line the verifier (``dschat.rewards.verify_answer``, math-verify) reads. A row
whose answer has no ``#### `` line is a one-line error naming it: a reference without an answer cannot score.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Optional

from ..errors import row_error
from ..hub import DatasetSource
from ..options import DataOptions
from ..records import read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import convert_rows

logger = logging.getLogger(__name__)

# main: the commit several public projects pin for these two files (read offline from their sources).
REVISION = "740312add88f781978c0658806c59bc2815b9866"
SOURCE = DatasetSource("openai/gsm8k", splits={"train": "train", "validation": "test", "test": "test"},
                       repo="openai/gsm8k", revision=REVISION,
                       files={split: f"main/{split}-00000-of-00001.parquet" for split in ("train", "test")})
SCHEMA = "gsm8k rows: question, answer (worked solution ending in '#### <final answer>')"
ANNOTATION = re.compile(r"<<[^<>]*>>")
FINAL = re.compile(r"\n?#### *(.+?)\s*$")


def load_gsm8k_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                     options: DataOptions = DataOptions()) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path, eval_data_path, options.eval_holdout)
    return convert_rows(rows, source, gsm8k_pair, logger)


def gsm8k_pair(record: Dict[str, Any], source: str, number: int) -> PreferencePair:
    question = require_field(record, "question", str, source, number, SCHEMA)
    answer = require_field(record, "answer", str, source, number, SCHEMA)
    final = FINAL.search(answer)
    if final is None:
        raise row_error(source, number, "the answer has no final '#### <answer>' line; a reference without an "
                                        "answer cannot be verified")
    steps = ANNOTATION.sub("", answer[:final.start()]).strip()
    solution = f"{steps}\nAnswer: {final.group(1)}" if steps else f"Answer: {final.group(1)}"
    return PreferencePair(prompt=f"Question: {question.strip()}\nSolution:", chosen=" " + solution,
                          origin=f"{source}, row {number}")


register(DatasetAdapter(name="gsm8k", load_pairs=load_gsm8k_pairs, answer_task="gsm8k"))
