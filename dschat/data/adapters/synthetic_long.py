"""The embedded long-response task (see :mod:`dschat.data.synthetic_long_task`).

Reads the shipped ``dschat/assets/synthetic-long/{train,validation}.jsonl`` unless ``data_path`` points
elsewhere; the short task's tokenizer covers it. Needs no network.
"""
from __future__ import annotations

from ..registry import DatasetAdapter, register
from ..synthetic_long_task import SPLIT_SIZES, SYNTHETIC_LONG_DATA_DIR, long_gold_score
from .synthetic import shipped_pairs_loader

load_long_pairs = shipped_pairs_loader("synthetic-long", SPLIT_SIZES, SYNTHETIC_LONG_DATA_DIR)
register(DatasetAdapter(name="synthetic-long", load_pairs=load_long_pairs, gold_score=long_gold_score))
