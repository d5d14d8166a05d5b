"""The train / evaluation split of rows that come without an evaluation split (paper Table 4, WebGPT).

WebGPT has only a ``train`` split on the hub; the authors' code (DeepSpeed-Chat's ``train_eval`` split with
``data_split="95,5"`` and ``--seed 1234``) holds out the *last* 5% of a seeded shuffle of its 19,578 rows for
evaluation: 18,599 train / 979 test rows, Table 4's 18.5k / 979. The same rule splits a single ``--data_path``
file given without ``--eval_data_path`` (any dataset), so no run evaluates on its own training rows.

The rule, as DeepSpeed-Chat's ``get_raw_dataset_split_index``: part boundaries are cumulative sums of
``round(weight share * n)`` shifted so the last one is ``n``; the order is ``numpy.random.RandomState(seed)``
shuffling ``arange(n)``; part ``k`` is that order's slice between boundaries ``k`` and ``k + 1``, kept in
shuffled order. One deviation: when that gives the evaluation part no row and ``n >= 2`` (fewer than about
ten rows at 95/5), the evaluation part takes one row, so a tiny file still has something to evaluate on.
The seed is fixed (:data:`HOLDOUT_SEED`, the authors' seed), not ``--seed``: every stage and evaluation tool
must hold out the same rows whatever seed trains the model.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from .errors import DataError

HOLDOUT_SEED = 1234
DEFAULT_HOLDOUT = "95,5"


def parse_holdout(holdout: str) -> Tuple[float, float]:
    """``"95,5"`` -> ``(95.0, 5.0)``: train and evaluation weights, non-negative, both parts possible."""
    parts = str(holdout).split(",")
    try:
        weights = tuple(float(part) for part in parts)
    except ValueError:
        weights = ()
    if len(weights) != 2 or not all(np.isfinite(w) and w >= 0 for w in weights) or min(weights) == 0:
        raise DataError(f"--eval_holdout {holdout!r}: expected two positive numbers 'train,eval' like '95,5'")
    return weights


def holdout_boundaries(n: int, weights: Sequence[float]) -> List[int]:
    """DeepSpeed-Chat's part boundaries: cumulative rounded shares, shifted so the last is ``n``."""
    total = sum(weights)
    boundaries = [0]
    for weight in weights:
        boundaries.append(boundaries[-1] + int(round(weight / total * float(n))))
    excess = boundaries[-1] - n
    boundaries = [0] + [boundary - excess for boundary in boundaries[1:]]
    if boundaries[-2] == n and n >= 2:
        boundaries[-2] = n - 1
    return boundaries


def holdout_indices(n: int, evaluation: bool, holdout: str = DEFAULT_HOLDOUT,
                    seed: int = HOLDOUT_SEED) -> List[int]:
    """Positions in ``range(n)`` of the training part (``evaluation=False``) or the held-out last part."""
    boundaries = holdout_boundaries(n, parse_holdout(holdout))
    order = np.arange(n, dtype=np.int64)
    np.random.RandomState(seed).shuffle(order)
    part = 1 if evaluation else 0
    return order[boundaries[part]:boundaries[part + 1]].tolist()
