"""The embedded reasoning task (see :mod:`dschat.data.arithmetic_task`).

Generated on load (deterministic) unless ``data_path`` points at a JSONL file or directory in the canonical
schema. Needs no network. Its reward is the answer verifier (``--reward verifier``), not a reward model.
"""
from __future__ import annotations

from typing import List, Optional

from ..arithmetic_task import SPLIT_SIZES, arithmetic_pairs
from ..errors import DataError
from ..options import DataOptions
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .jsonl import load_jsonl_pairs


def load_arithmetic_pairs(split: str = "train", data_path: Optional[str] = None,
                          eval_data_path: Optional[str] = None,
                          options: DataOptions = DataOptions()) -> List[PreferencePair]:
    if split not in SPLIT_SIZES:
        raise DataError(f"arithmetic: unknown split {split!r}; known splits: {', '.join(SPLIT_SIZES)}")
    if data_path is not None:
        return load_jsonl_pairs(split, data_path, eval_data_path, options)
    return arithmetic_pairs(split)


register(DatasetAdapter(name="arithmetic", load_pairs=load_arithmetic_pairs, answer_task="arithmetic"))
