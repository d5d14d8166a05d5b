"""The repetition helpers every paired benchmark here shares: the compared sides run in an order rotated by one
position per repetition (none always goes first, warm or cold), and each printed figure is ``median [min, max]``
over the repetitions (the spread next to the centre, never a mean alone)."""
from __future__ import annotations

import statistics
from typing import List, Sequence, TypeVar

Item = TypeVar("Item")


def rotated(items: Sequence[Item], repetition: int) -> List[Item]:
    """``items`` rotated left by ``repetition`` positions (modulo their count)."""
    shift = repetition % len(items)
    return list(items[shift:]) + list(items[:shift])


def spread(values: Sequence[float], digits: int = 3, unit: str = "") -> str:
    """``median[unit] [min, max]`` to ``digits`` decimals."""
    return f"{statistics.median(values):.{digits}f}{unit} [{min(values):.{digits}f}, {max(values):.{digits}f}]"
