"""The embedded synthetic preference task (see :mod:`dschat.data.synthetic_task`).

Reads the shipped ``dschat/assets/synthetic/{train,validation}.jsonl`` (canonical schema) unless
``data_path`` points elsewhere. Needs no network: it is the default dataset of demos, tests and CI.
"""
from __future__ import annotations

from typing import Callable, List, Mapping, Optional

from ..errors import DataError
from ..options import DataOptions
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from ..synthetic_task import SPLIT_SIZES, SYNTHETIC_DATA_DIR, synthetic_gold_score
from .jsonl import load_jsonl_pairs


def shipped_pairs_loader(name: str, split_sizes: Mapping[str, int], data_dir) -> Callable[..., List[PreferencePair]]:
    """``load_pairs`` of an embedded task: its shipped JSONL splits in ``data_dir`` (canonical schema) unless
    ``data_path`` points elsewhere."""
    def load_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                   options: DataOptions = DataOptions()) -> List[PreferencePair]:
        if split not in split_sizes:
            raise DataError(f"{name}: unknown split {split!r}; known splits: {', '.join(split_sizes)}")
        return load_jsonl_pairs(split, str(data_path or data_dir), eval_data_path, options)
    return load_pairs


load_synthetic_pairs = shipped_pairs_loader("synthetic", SPLIT_SIZES, SYNTHETIC_DATA_DIR)
register(DatasetAdapter(name="synthetic", load_pairs=load_synthetic_pairs, gold_score=synthetic_gold_score))
