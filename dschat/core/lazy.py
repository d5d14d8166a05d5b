"""Lazy package exports (PEP 562): ``from package import name`` imports the submodule that defines ``name`` on
first use, so a light submodule of a package (config names, registries) can be imported without the heavy ones
(torch) — what keeps ``--help`` and flag errors fast."""
from __future__ import annotations

import importlib
from typing import Callable, Dict, Iterable, List


def lazy_exports(package: str, modules: Dict[str, Iterable[str]]) -> tuple:
    """``(__getattr__, __dir__, __all__)`` for ``package`` exporting each ``{submodule: names}`` lazily."""
    origin = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):
        if name not in origin:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{origin[name]}", package), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(origin) | set(vars(importlib.import_module(package))))

    exported: Callable = __getattr__
    return exported, __dir__, sorted(origin)
