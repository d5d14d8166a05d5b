"""Environments registered by name (``--env``), like dataset adapters: a module of this package registers its
class with ``@register_environment("name")`` at import and the package's ``__init__`` imports it (torch-free)."""
from __future__ import annotations

import importlib
from typing import Callable, Dict, List

from .base import TextEnvironment

_ENVIRONMENTS: Dict[str, Callable[[], TextEnvironment]] = {}
BUILT_IN = ("consistency",)
"""The modules of this package that register an environment (imported when the registry is first asked)."""


def register_environment(name: str):
    """Class decorator: ``--env name`` builds a fresh instance of the class (no arguments) per episode."""

    def wrap(factory):
        if name in _ENVIRONMENTS:
            raise ValueError(f"environment {name!r} is registered twice")
        _ENVIRONMENTS[name] = factory
        return factory

    return wrap


def _environments() -> Dict[str, Callable[[], TextEnvironment]]:
    for module in BUILT_IN:
        importlib.import_module(f".{module}", __package__)
    return _ENVIRONMENTS


def available_environments() -> List[str]:
    """The names ``--env`` accepts."""
    return sorted(_environments())


def make_environment(name: str) -> TextEnvironment:
    """A fresh instance of environment ``name``; a ValueError naming ``--env`` for an unknown one."""
    environments = _environments()
    if name not in environments:
        raise ValueError(f"--env {name!r} is unknown; expected one of {sorted(environments)}")
    return environments[name]()


def environment_tasks(name: str, split: str, limit: int = 0) -> List[str]:
    """The first ``limit`` tasks of ``split`` of environment ``name`` (all when 0)."""
    tasks = make_environment(name).tasks(split)
    return tasks[:limit] if limit else tasks
