"""Dataset adapters registered by name.

An adapter module builds one :class:`DatasetAdapter` and calls :func:`register` at import time;
``dschat.data.adapters`` imports them all. Loader signatures:

* ``load_pairs(split, data_path=None, eval_data_path=None, options=DataOptions()) -> list[PreferencePair]``
* ``load_code_tasks(split, data_path=None, eval_data_path=None, options=DataOptions()) -> list[CodeTask]``
* ``pairs_from_tasks(tasks) -> list[PreferencePair]`` for code datasets whose SFT pairs are
  (prompt, reference solution): the phase split then runs over the tasks, so SFT solutions never come
  from problems held for PPO.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from .errors import DataError
from .schema import CodeTask, PreferencePair

PairLoader = Callable[..., List[PreferencePair]]
CodeTaskLoader = Callable[..., List[CodeTask]]


@dataclass(frozen=True)
class DatasetAdapter:
    """How one dataset is read: its name and loaders (a loader reads the hub, or ``data_path`` when given)."""

    name: str
    load_pairs: Optional[PairLoader] = None
    load_code_tasks: Optional[CodeTaskLoader] = None
    pairs_from_tasks: Optional[Callable[[List[CodeTask]], List[PreferencePair]]] = None
    gold_score: Optional[Callable[[str], float]] = None
    """The ground-truth score of a response, for embedded tasks that have one (step 3 logs ``eval/gold``)."""
    answer_task: Optional[str] = None
    """For reasoning datasets with a verifiable final answer: the ``task`` of
    :func:`dschat.rewards.verify_answer` that judges its responses (``--reward verifier``)."""


_ADAPTERS: Dict[str, DatasetAdapter] = {}


def register(adapter: DatasetAdapter) -> DatasetAdapter:
    if adapter.name in _ADAPTERS:
        raise ValueError(f"dataset adapter {adapter.name!r} is registered twice")
    _ADAPTERS[adapter.name] = adapter
    return adapter


def _adapters() -> Dict[str, DatasetAdapter]:
    """Every adapter (importing the ``adapters`` package registers them; it needs no torch)."""
    importlib.import_module(".adapters", __package__)
    return _ADAPTERS


def known_datasets() -> List[str]:
    return sorted(_adapters())


def gold_score_of(name: str) -> Optional[Callable[[str], float]]:
    """Dataset ``name``'s gold score function, or None (unknown datasets and those without one)."""
    adapter = _adapters().get(name)
    return adapter.gold_score if adapter else None


def answer_task_of(name: str) -> Optional[str]:
    """Dataset ``name``'s answer-verifier task, or None (unknown datasets and those without a verifiable answer)."""
    adapter = _adapters().get(name)
    return adapter.answer_task if adapter else None


def verified_datasets() -> List[str]:
    """The datasets ``--reward verifier`` can judge."""
    return [name for name in known_datasets() if _ADAPTERS[name].answer_task]


def get_adapter(name: str) -> DatasetAdapter:
    if name not in _adapters():
        raise DataError(f"unknown dataset {name!r}; known datasets: {', '.join(known_datasets())}")
    return _ADAPTERS[name]
