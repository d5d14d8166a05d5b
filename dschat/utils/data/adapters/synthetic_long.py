"""The embedded long-response task (see :mod:`dschat.utils.data.synthetic_long_task`).

Reads the shipped ``dschat/assets/synthetic-long/{train,validation}.jsonl`` unless ``data_path`` points
elsewhere; the short task's tokenizer covers it. Needs no network.
"""
from __future__ import annotations

from typing import List, Optional

from ..errors import DataError
from ..options import DataOptions
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from ..synthetic_long_task import SPLIT_SIZES, SYNTHETIC_LONG_DATA_DIR, long_gold_score
from .jsonl import load_jsonl_pairs


def load_long_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                    options: DataOptions = DataOptions()) -> List[PreferencePair]:
    if split not in SPLIT_SIZES:
        raise DataError(f"synthetic-long: unknown split {split!r}; known splits: {', '.join(SPLIT_SIZES)}")
    return load_jsonl_pairs(split, str(data_path or SYNTHETIC_LONG_DATA_DIR), eval_data_path, options)


register(DatasetAdapter(name="synthetic-long", load_pairs=load_long_pairs, gold_score=long_gold_score))
