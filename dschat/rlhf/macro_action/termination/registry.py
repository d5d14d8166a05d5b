"""Registry of termination rules: a new rule is one module plus one ``@register_termination`` line.

The trainer calls ``build_termination(name, options)`` once and never branches on rule names.
"""
from __future__ import annotations

from typing import Callable, Dict

from .base import TerminationOptions, TerminationRule

RuleBuilder = Callable[[TerminationOptions], TerminationRule]
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
    return sorted(_BUILDERS) + sorted(_ALIASES)


def build_termination(name: str, options: TerminationOptions) -> TerminationRule:
    """The rule registered as ``name`` (or an alias of it), configured by ``options``."""
    key = _ALIASES.get(name, name)
    if key not in _BUILDERS:
        raise ValueError(f"--termination {name!r} is unknown; expected one of {available_terminations()}")
    return _BUILDERS[key](options)
