"""Tree providers for the parsing-based termination rule (paper §3.2.1, Appendix B.4, Appendix D.2).

``get_tree_provider(name)`` with ``name`` one of :data:`PARSERS`:

- ``spacy``: phrase trees derived from spaCy's dependency parse (offline; an approximation of a constituency
  tree, see :mod:`.spacy_tree`);
- ``benepar``: benepar constituency trees (the paper's parser), needs the installed model ``benepar_en3``;
- ``auto``: ``benepar`` if ``benepar_en3`` is installed, else ``spacy`` (never downloads);
- ``code``: Python statement trees (``ast``, RedBaron for Python 2 syntax), see :mod:`.code_tree`.

Providers are built once per process and name (spaCy and benepar models take seconds to load).
"""
from __future__ import annotations

import functools
from typing import Optional

from .tree import Node, ParseError, TreeProvider

PARSERS = ("auto", "spacy", "benepar", "code")

__all__ = ["PARSERS", "Node", "ParseError", "TreeProvider", "get_tree_provider", "parser_missing",
           "resolve_parser_name"]


def resolve_parser_name(name: str) -> str:
    """``name`` with ``auto`` resolved (benepar if its model is installed, else spacy); ValueError if unknown."""
    if name not in PARSERS:
        raise ValueError(f"--parser {name!r} is unknown; expected one of {', '.join(PARSERS)}")
    if name != "auto":
        return name
    from .benepar_tree import benepar_model_installed

    return "benepar" if benepar_model_installed() else "spacy"


def parser_missing(name: str) -> Optional[str]:
    """None when parser ``name`` can be built here; else the one line saying what is not installed (looking only
    on disk: no model is loaded or downloaded), which building it raises too."""
    resolved = resolve_parser_name(name)
    if resolved == "benepar":
        from .benepar_tree import benepar_missing

        missing = benepar_missing()
        if missing:
            return missing
    if resolved in ("spacy", "benepar"):  # benepar splits sentences with spaCy
        from .spacy_tree import spacy_model_missing

        return spacy_model_missing()
    return None


@functools.lru_cache(maxsize=None)
def get_tree_provider(name: str = "auto") -> TreeProvider:
    """The tree provider called ``name`` (one of :data:`PARSERS`), built once per process."""
    resolved = resolve_parser_name(name)
    if resolved == "spacy":
        from .spacy_tree import SpacyTreeProvider

        return SpacyTreeProvider()
    if resolved == "benepar":
        from .benepar_tree import BeneparTreeProvider

        return BeneparTreeProvider()
    from .code_tree import CodeTreeProvider

    return CodeTreeProvider()
