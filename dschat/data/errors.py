"""The one exception type bad data input raises, and the counter behind every logged skip.

Bad input is either fatal or skippable, never silently absorbed:

* fatal (a missing file, a row without a required field, an unknown dataset or split, a malformed
  ``data_split``): raise :class:`DataError`, a ``ValueError`` whose one-line message names the source (file
  path or hub dataset), the row and what was expected;
* skippable (an empty response, a WebGPT tie, an APPS row whose JSON does not parse, an example longer than
  the token budget): count it in a :class:`SkipCounter`, which logs one warning line per source with the
  count per reason and the first few row identifiers.
"""
from __future__ import annotations

import logging
from collections import Counter, defaultdict
from typing import Dict, List


class DataError(ValueError):
    """Bad data input. The message is one line: source, row (where there is one) and what was expected."""


def row_error(source: str, row_number: int, what: str) -> DataError:
    """A :class:`DataError` pointing at one row (rows are numbered from 1, JSONL rows by line number)."""
    return DataError(f"{source}, row {row_number}: {what}")


class SkipCounter:
    """Counts skipped rows per reason for one source and logs a one-line summary.

    ``counts`` maps a reason to how many rows were skipped for it; ``examples`` keeps the first
    ``max_examples`` identifiers (row numbers, problem ids) per reason for the log line.
    """

    def __init__(self, source: str, max_examples: int = 5):
        self.source = source
        self.max_examples = max_examples
        self.counts: Counter = Counter()
        self.examples: Dict[str, List[str]] = defaultdict(list)

    def skip(self, reason: str, item: str) -> None:
        self.counts[reason] += 1
        if len(self.examples[reason]) < self.max_examples:
            self.examples[reason].append(item)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def log_summary(self, logger: logging.Logger, seen: int) -> None:
        """Warn once with every reason, its count and example identifiers; silent when nothing was skipped."""
        if not self.total:
            return
        details = "; ".join(
            f"{reason}: {count} (e.g. {', '.join(self.examples[reason])})"
            for reason, count in sorted(self.counts.items())
        )
        logger.warning("%s: skipped %d of %d rows: %s", self.source, self.total, seen, details)
