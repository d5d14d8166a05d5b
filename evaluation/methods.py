"""One table of method names: every table and figure matches a method name case- and spelling-insensitively
(``MA-PPO``, ``ma_ppo``, ``MAPPO`` and ``mappo`` are one method), labels it one way and draws it in one colour.

A name outside the table keeps its own spelling and gets a colour of its own, the same in every figure (chosen
from its name, not from its position among the figure's methods)."""
from __future__ import annotations

import re
import zlib
from typing import Dict, Tuple

METHODS: Dict[str, Tuple[str, str]] = {
    "sft": ("SFT", "#7f7f7f"),
    "dpo": ("DPO", "#9467bd"),
    "rloo": ("RLOO", "#8c564b"),
    "grpo": ("GRPO", "#e377c2"),
    "reinforce": ("REINFORCE", "#bcbd22"),
    "ppo": ("Vanilla PPO", "#1f77b4"),
    "mappo": ("MA-PPO (n=5)", "#ff7f0e"),
}
"""key -> (label in tables, colour in figures); the paper's methods (Tables 2 and 7, Appendix C.3)."""
ALIASES = {"vanillappo": "ppo", "mappon5": "mappo"}
"""Squashed spellings (lower case, letters and digits only) of a key besides the key itself."""
OTHER_COLORS = ("#2ca02c", "#17becf", "#d62728", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94")
"""Colours of names outside :data:`METHODS` (none of the table's)."""


def squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def method_key(name: str) -> str:
    """The table's key of ``name`` (``MA-PPO`` -> ``mappo``, ``Vanilla PPO`` -> ``ppo``); a name outside the table
    in lower case."""
    squashed = squash(name)
    squashed = ALIASES.get(squashed, squashed)
    return squashed if squashed in METHODS else name.lower()


def method_label(name: str) -> str:
    key = method_key(name)
    return METHODS[key][0] if key in METHODS else name


def method_color(name: str) -> str:
    """``name``'s colour in every figure: the table's, else one picked from the name itself."""
    key = method_key(name)
    if key in METHODS:
        return METHODS[key][1]
    return OTHER_COLORS[zlib.crc32(key.encode()) % len(OTHER_COLORS)]
