"""Load a dataset by its registered name, whole or as the part one training phase uses.

Names: ``apps``, ``hh-rlhf``, ``humaneval``, ``jsonl``, ``synthetic``, ``tldr``, ``webgpt`` (each
documented in its module under ``adapters``). Splits are ``train`` and ``validation`` (plus ``test`` where
the hub has one; ``humaneval`` has only ``test``).

The phase split (:mod:`dschat.utils.data.phase_split`) applies to the ``train`` split only: evaluation
splits are never trained on, so every phase evaluates on all of them. For code datasets (APPS) the split
runs over the problems, and SFT pairs are then drawn from the SFT problems' reference solutions, so no
solution of a PPO problem is trained on.
"""
from __future__ import annotations

import logging
from typing import List, Optional

from . import adapters  # noqa: F401  (registers every adapter)
from .errors import DataError
from .phase_split import phase_split
from .registry import get_adapter, known_datasets
from .schema import CodeTask, PreferencePair

logger = logging.getLogger(__name__)

PHASE_SPLIT_SOURCE = "train"


def load_pairs(name: str, split: str = "train", data_path: Optional[str] = None, **options) -> List[PreferencePair]:
    """Every preference pair of ``split``; ``options`` go to the adapter (e.g. webgpt's ``seed``)."""
    adapter = get_adapter(name)
    if adapter.load_pairs is None:
        raise DataError(f"dataset {name!r} has code tasks only; use load_code_tasks "
                        f"(pair datasets: {', '.join(pair_datasets())})")
    return adapter.load_pairs(split, data_path, **options)


def load_code_tasks(name: str, split: str = "train", data_path: Optional[str] = None, **options) -> List[CodeTask]:
    adapter = get_adapter(name)
    if adapter.load_code_tasks is None:
        raise DataError(f"dataset {name!r} has no code tasks; code datasets: {', '.join(code_datasets())}")
    return adapter.load_code_tasks(split, data_path, **options)


def pair_datasets() -> List[str]:
    return [name for name in known_datasets() if get_adapter(name).load_pairs is not None]


def code_datasets() -> List[str]:
    return [name for name in known_datasets() if get_adapter(name).load_code_tasks is not None]


def pairs_for_phase(name: str, phase: int, data_split: str = "2,4,4", split: str = "train",
                    data_path: Optional[str] = None, seed: int = 1234,
                    cache_dir: Optional[str] = None) -> List[PreferencePair]:
    """The pairs phase ``phase`` (0 SFT, 1 RM, 2 PPO) trains on, or all of an evaluation split."""
    adapter = get_adapter(name)
    if adapter.pairs_from_tasks is not None:
        tasks = code_tasks_for_phase(name, phase, data_split, split, data_path, seed, cache_dir)
        return adapter.pairs_from_tasks(tasks)
    pairs = load_pairs(name, split, data_path)
    if split != PHASE_SPLIT_SOURCE:
        return pairs
    return phase_split(pairs, data_split, phase, seed, cache_dir, dataset_name=name)


def code_tasks_for_phase(name: str, phase: int, data_split: str = "2,0,8", split: str = "train",
                         data_path: Optional[str] = None, seed: int = 1234,
                         cache_dir: Optional[str] = None) -> List[CodeTask]:
    """The code tasks of phase ``phase`` (the paper's APPS split is ``"2,0,8"``), or all of an evaluation split."""
    tasks = load_code_tasks(name, split, data_path)
    if split != PHASE_SPLIT_SOURCE:
        return tasks
    return phase_split(tasks, data_split, phase, seed, cache_dir, dataset_name=name)
