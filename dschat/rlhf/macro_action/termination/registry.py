"""Registry of termination rules: a new rule is one module of this package with one
``@register_termination("name")`` line; nothing else names it.

The rule names are read from the package's module files (the literal arguments of their ``register_termination``
decorators, :func:`rule_modules`) without importing them, so ``--termination`` lists and checks names without
torch; a rule's module is imported when the rule is built. The trainer calls ``build_termination(name, options)``
once and never branches on rule names.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Sequence

if TYPE_CHECKING:
    from .base import TerminationRule
    from .options import TerminationOptions

RuleBuilder = Callable[["TerminationOptions"], "TerminationRule"]
_BUILDERS: Dict[str, RuleBuilder] = {}
_ALIASES: Dict[str, str] = {}


def register_termination(name: str, *, aliases: Sequence[str] = ()) -> Callable[[RuleBuilder], RuleBuilder]:
    """Decorator registering ``builder(options) -> rule`` under ``name`` (and each of ``aliases``). ``name`` and
    ``aliases`` are literals: :func:`declared_rules` reads them from the module's source."""

    def wrap(builder: RuleBuilder) -> RuleBuilder:
        if name in _BUILDERS:
            raise ValueError(f"termination rule {name!r} is registered twice")
        _BUILDERS[name] = builder
        _ALIASES.update({alias: name for alias in aliases})
        return builder

    return wrap


def _registers(decorator: ast.expr) -> bool:
    function = getattr(decorator, "func", None)
    return getattr(function, "id", getattr(function, "attr", None)) == register_termination.__name__


def declared_rules(source: str) -> Dict[str, str]:
    """``{name or alias: rule name}`` of the ``@register_termination(...)`` decorators in a module's ``source``."""
    names: Dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        for decorator in getattr(node, "decorator_list", ()):
            if isinstance(decorator, ast.Call) and _registers(decorator):
                name = ast.literal_eval(decorator.args[0])
                aliases = next((ast.literal_eval(k.value) for k in decorator.keywords if k.arg == "aliases"), ())
                names.update({key: name for key in (name, *aliases)})
    return names


def rule_modules(paths: Iterable[str] = ()) -> Dict[str, tuple]:
    """``{name or alias: (module, rule name)}`` of every rule declared by a module of this package (its
    ``__path__``, or ``paths``), found by reading the module files, not importing them."""
    paths = list(paths) or list(sys.modules[__package__].__path__)
    found: Dict[str, tuple] = {}
    for info in pkgutil.iter_modules(paths):
        source = Path(info.module_finder.path) / f"{info.name}.py"
        if info.ispkg or not source.is_file():
            continue
        for key, name in declared_rules(source.read_text(encoding="utf-8")).items():
            found[key] = (info.name, name)
    return found


def available_terminations() -> list:
    """Names accepted by ``--termination``: the rules, then their aliases."""
    rules = {key: name for key, (_, name) in rule_modules().items()}
    rules.update({name: name for name in _BUILDERS})
    rules.update(_ALIASES)
    return sorted(key for key, name in rules.items() if key == name) + sorted(key for key, name in rules.items()
                                                                             if key != name)


def build_termination(name: str, options: TerminationOptions) -> TerminationRule:
    """The rule registered as ``name`` (or an alias of it), configured by ``options``."""
    modules = rule_modules()
    key = _ALIASES.get(name, name)
    if key not in _BUILDERS and name in modules:
        importlib.import_module(f".{modules[name][0]}", __package__)
        key = _ALIASES.get(name, name)
    if key not in _BUILDERS:
        raise ValueError(f"--termination {name!r} is unknown; expected one of {available_terminations()}")
    return _BUILDERS[key](options)
