"""The three-phase data split (paper Appendix B.2): one dataset, disjoint parts for SFT, RM and PPO.

``data_split`` is a comma-separated weight per phase, phase 0 = SFT, 1 = reward model, 2 = PPO; the paper
uses ``"2,4,4"`` (20% / 40% / 40%) and ``"2,0,8"`` for APPS (no reward model, 80% PPO). Weights are
non-negative numbers with a positive sum; they need not sum to 10 or 1.

The partition: a permutation of ``range(n)`` from ``numpy.random.RandomState(seed)`` (a stream numpy keeps
frozen across versions) is cut into consecutive parts whose sizes are the weights' shares of ``n``, rounded
by largest remainder so they sum to ``n`` exactly. So it is disjoint, complete, and a pure function of
``(n, weights, seed)``: every process, rank and run computes the same one. With ``cache_dir`` set, the
phase of every index is also stored as ``{dataset}_n{n}_split{w0-w1-w2}_seed{seed}.npy`` (int8 per index)
so the split a run used stays on disk beside its outputs; a later call checks the stored file against
the recomputed partition and rewrites it (with a warning) if they differ.
"""
from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, TypeVar

import numpy as np

from .errors import DataError

logger = logging.getLogger(__name__)

PHASE_NAMES = ("SFT", "reward model", "PPO")
Item = TypeVar("Item")


def parse_data_split(data_split: str) -> List[float]:
    """``"2,4,4"`` -> ``[2.0, 4.0, 4.0]``; a DataError unless it is three non-negative numbers summing > 0."""
    parts = [part.strip() for part in str(data_split).split(",")]
    try:
        weights = [float(part) for part in parts]
    except ValueError:
        raise DataError(f"data_split {data_split!r}: expected {len(PHASE_NAMES)} comma-separated numbers "
                        "like '2,4,4'") from None
    if len(weights) != len(PHASE_NAMES):
        raise DataError(f"data_split {data_split!r}: expected {len(PHASE_NAMES)} weights "
                        f"({', '.join(PHASE_NAMES)}), got {len(weights)}")
    if any(not np.isfinite(weight) or weight < 0 for weight in weights) or sum(weights) <= 0:
        raise DataError(f"data_split {data_split!r}: weights must be finite, non-negative and sum to a "
                        "positive number")
    return weights


def phase_sizes(n: int, weights: Sequence[float]) -> List[int]:
    """Sizes proportional to ``weights`` summing to ``n``: floors, then the largest remainders get +1."""
    shares = [n * weight / sum(weights) for weight in weights]
    sizes = [int(np.floor(share)) for share in shares]
    by_remainder = sorted(range(len(shares)), key=lambda k: (sizes[k] - shares[k], k))
    for k in by_remainder[: n - sum(sizes)]:
        sizes[k] += 1
    return sizes


def phase_assignment(n: int, weights: Sequence[float], seed: int) -> np.ndarray:
    """The phase (0, 1, 2) of every index in ``range(n)``, as int8."""
    permutation = np.random.RandomState(seed).permutation(n)
    assignment = np.empty(n, dtype=np.int8)
    start = 0
    for phase, size in enumerate(phase_sizes(n, weights)):
        assignment[permutation[start:start + size]] = phase
        start += size
    return assignment


def phase_indices(n: int, data_split: str = "2,4,4", phase: int = 0, seed: int = 1234,
                  cache_dir: Optional[str] = None, dataset_name: str = "dataset") -> np.ndarray:
    """Sorted indices in ``range(n)`` that belong to ``phase`` (0 SFT, 1 RM, 2 PPO) under ``data_split``."""
    weights = parse_data_split(data_split)
    if phase not in range(len(PHASE_NAMES)):
        raise DataError(f"phase {phase!r}: expected 0 (SFT), 1 (reward model) or 2 (PPO)")
    if n < 0:
        raise DataError(f"phase split of {n} items: the item count cannot be negative")
    if cache_dir is None:
        assignment = phase_assignment(n, weights, seed)
    else:
        assignment = cached_phase_assignment(Path(cache_dir), dataset_name, n, weights, seed)
    return np.flatnonzero(assignment == phase)


def phase_split(items: Sequence[Item], data_split: str = "2,4,4", phase: int = 0, seed: int = 1234,
                cache_dir: Optional[str] = None, dataset_name: str = "dataset") -> List[Item]:
    """The items of ``phase``, in their original order."""
    indices = phase_indices(len(items), data_split, phase, seed, cache_dir, dataset_name)
    logger.info("%s: phase %d (%s) of split %s: %d of %d items", dataset_name, phase, PHASE_NAMES[phase],
                data_split, len(indices), len(items))
    return [items[index] for index in indices]


def cache_file(cache_dir: Path, dataset_name: str, n: int, weights: Sequence[float], seed: int) -> Path:
    safe_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", dataset_name)
    split_key = "-".join(f"{weight:g}" for weight in weights)
    return cache_dir / f"{safe_name}_n{n}_split{split_key}_seed{seed}.npy"


def cached_phase_assignment(cache_dir: Path, dataset_name: str, n: int, weights: Sequence[float],
                            seed: int) -> np.ndarray:
    """The assignment, checked against or written to the cache (atomically: no rank reads half a file)."""
    path = cache_file(cache_dir, dataset_name, n, weights, seed)
    expected = phase_assignment(n, weights, seed)
    if path.is_file():
        stored = np.load(path)
        if np.array_equal(stored, expected):
            return stored
        logger.warning("%s: stored phase split differs from the recomputed one; rewriting it", path)
    cache_dir.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=cache_dir, suffix=".npy.tmp")
    with os.fdopen(handle, "wb") as stream:
        np.save(stream, expected)
    os.replace(temporary, path)
    return expected

