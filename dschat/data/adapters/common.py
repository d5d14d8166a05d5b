"""The row loop every adapter shares: convert each row, count and log the rows it skips."""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, TypeVar

from ..errors import DataError, SkipCounter
from ..records import Row

Item = TypeVar("Item")
RowConverter = Callable[[Dict[str, Any], str, int], Item]


class SkipRow(Exception):
    """Raised by a row converter for a row to count and leave out; ``item`` names it in the log line."""

    def __init__(self, reason: str, item: Optional[str] = None):
        super().__init__(reason)
        self.reason = reason
        self.item = item


def convert_rows(rows: List[Row], source: str, convert: RowConverter, logger: logging.Logger) -> List[Item]:
    """``convert(record, source, row_number)`` on every row; SkipRow rows are counted and logged once.

    Rows that are all skipped are a DataError: an empty split must fail when it is loaded, not train or
    evaluate on nothing."""
    skips = SkipCounter(source)
    items = []
    for number, record in rows:
        try:
            items.append(convert(record, source, number))
        except SkipRow as skip:
            skips.skip(skip.reason, skip.item or f"row {number}")
    skips.log_summary(logger, len(rows))
    if rows and not items:
        reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(skips.counts.items()))
        raise DataError(f"{source}: all {len(rows)} rows were skipped ({reasons}); no usable rows")
    return items


def nonempty_response(text: str) -> str:
    """The response as given, or SkipRow('empty response') when it is blank."""
    if not text.strip():
        raise SkipRow("empty response")
    return text
