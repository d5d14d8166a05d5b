"""Registry of termination rules: a new rule is one module with one ``@register_termination`` line, plus its
name in :data:`RULE_MODULES` (which lets ``--termination`` list and check names without importing torch).

The trainer calls ``build_termination(name, options)`` once and never branches on rule names.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable, Dict

if TYPE_CHECKING:
    from .base import TerminationOptions, TerminationRule

RuleBuilder = Callable[["TerminationOptions"], "TerminationRule"]
RULE_MODULES = {"fixed": "ngram", "randomized": "randomized", "ppl": "ppl", "parsing": "parsing", "entropy": "entropy"}
"""Rule name -> the module of this package that registers it (imported when the rule is built)."""
_BUILDERS: Dict[str, RuleBuilder] = {}
_ALIASES = {"ngram": "fixed"}


def register_termination(name: str) -> Callable[[RuleBuilder], RuleBuilder]:
    """Decorator registering ``builder(options) -> rule`` under ``name``."""

    def wrap(builder: RuleBuilder) -> RuleBuilder:
        if name in _BUILDERS:
            raise ValueError(f"termination rule {name!r} is registered twice")
        _BUILDERS[name] = builder
        return builder

    return wrap


def available_terminations() -> list:
    """Names accepted by ``--termination`` (aliases included)."""
    return sorted(set(RULE_MODULES) | set(_BUILDERS)) + sorted(_ALIASES)


def build_termination(name: str, options: TerminationOptions) -> TerminationRule:
    """The rule registered as ``name`` (or an alias of it), configured by ``options``."""
    key = _ALIASES.get(name, name)
    if key not in _BUILDERS and key in RULE_MODULES:
        importlib.import_module(f".{RULE_MODULES[key]}", __package__)
    if key not in _BUILDERS:
        raise ValueError(f"--termination {name!r} is unknown; expected one of {available_terminations()}")
    return _BUILDERS[key](options)
