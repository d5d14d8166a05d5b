"""Load a dataset by its registered name, whole or as the part one training phase uses.

Names: ``apps``, ``hh-rlhf``, ``humaneval``, ``jsonl``, ``synthetic``, ``tldr``, ``webgpt`` (each
documented in its module under ``adapters``). Splits are ``train`` and ``validation`` (plus ``test`` where
the hub has one; ``humaneval`` has only ``test``). ``data_path`` / ``eval_data_path`` choose local data and
``options`` the processing choices (:mod:`dschat.data.records`, :mod:`dschat.data.options`).

The phase split (:mod:`dschat.data.phase_split`) applies to the ``train`` split only: evaluation
splits are never trained on, so every phase evaluates on all of them. For code datasets (APPS) the split
runs over the problems, and SFT pairs are then drawn from the SFT problems' reference solutions, so no
solution of a PPO problem is trained on.
"""
from __future__ import annotations

import logging
from typing import List, Optional

from . import adapters  # noqa: F401  (registers every adapter)
from .errors import DataError, SkipCounter
from .options import DataOptions
from .phase_split import phase_split
from .registry import get_adapter, known_datasets
from .schema import CodeTask, PreferencePair

logger = logging.getLogger(__name__)

PHASE_SPLIT_SOURCE = "train"


def load_pairs(name: str, split: str = "train", data_path: Optional[str] = None,
               eval_data_path: Optional[str] = None, options: Optional[DataOptions] = None) -> List[PreferencePair]:
    """Every preference pair of ``split``."""
    adapter = get_adapter(name)
    if adapter.load_pairs is None:
        raise DataError(f"dataset {name!r} has code tasks only; use load_code_tasks "
                        f"(pair datasets: {', '.join(pair_datasets())})")
    return adapter.load_pairs(split, data_path, eval_data_path, options or DataOptions())


def load_code_tasks(name: str, split: str = "train", data_path: Optional[str] = None,
                    eval_data_path: Optional[str] = None, options: Optional[DataOptions] = None) -> List[CodeTask]:
    adapter = get_adapter(name)
    if adapter.load_code_tasks is None:
        raise DataError(f"dataset {name!r} has no code tasks (what --reward code runs); code datasets: "
                        f"{', '.join(code_datasets())}")
    return adapter.load_code_tasks(split, data_path, eval_data_path, options or DataOptions())


def pair_datasets() -> List[str]:
    return [name for name in known_datasets() if get_adapter(name).load_pairs is not None]


def code_datasets() -> List[str]:
    return [name for name in known_datasets() if get_adapter(name).load_code_tasks is not None]


def pairs_for_phase(name: str, phase: int, data_split: str = "2,4,4", split: str = "train",
                    data_path: Optional[str] = None, seed: int = 1234, cache_dir: Optional[str] = None,
                    eval_data_path: Optional[str] = None, options: Optional[DataOptions] = None
                    ) -> List[PreferencePair]:
    """The pairs phase ``phase`` (0 SFT, 1 RM, 2 PPO) trains on, or all of an evaluation split."""
    adapter = get_adapter(name)
    if adapter.pairs_from_tasks is not None:
        tasks = code_tasks_for_phase(name, phase, data_split, split, data_path, seed, cache_dir, eval_data_path,
                                     options)
        return adapter.pairs_from_tasks(tasks)
    pairs = load_pairs(name, split, data_path, eval_data_path, options)
    if split != PHASE_SPLIT_SOURCE:
        return pairs
    return phase_split(pairs, data_split, phase, seed, cache_dir, dataset_name=name)


def code_tasks_for_phase(name: str, phase: int, data_split: str = "2,0,8", split: str = "train",
                         data_path: Optional[str] = None, seed: int = 1234, cache_dir: Optional[str] = None,
                         eval_data_path: Optional[str] = None, options: Optional[DataOptions] = None
                         ) -> List[CodeTask]:
    """The code tasks of phase ``phase`` (the paper's APPS split is ``"2,0,8"``), or all of an evaluation split."""
    tasks = load_code_tasks(name, split, data_path, eval_data_path, options)
    if split != PHASE_SPLIT_SOURCE:
        return tasks
    return phase_split(tasks, data_split, phase, seed, cache_dir, dataset_name=name)


def tasks_with_tests(tasks: List[CodeTask], what: str) -> List[CodeTask]:
    """The tasks a completion can be checked on (PPO's execution reward, pass@k); the rest counted and logged.

    APPS rows with an empty ``input_output`` have no test cases: as PPO prompts they would earn a reward that
    says nothing about the code."""
    skips = SkipCounter(what)
    kept = []
    for task in tasks:
        if task.has_tests:
            kept.append(task)
        else:
            skips.skip("no test cases (empty input_output)", f"problem_id {task.task_id}")
    skips.log_summary(logger, len(tasks))
    if tasks and not kept:
        raise DataError(f"{what}: none of the {len(tasks)} tasks has test cases; code rewards need them")
    return kept
