"""TL;DR summarisation preferences: ``openai/summarize_from_feedback``, config ``comparisons``.

Read from the hub's Parquet export (the repository's loading script no longer runs): files
``comparisons/{train,validation}/0000.parquet`` at commit :data:`PARQUET_REVISION` of
``refs/convert/parquet`` (92,858 / 86,086 rows: Table 4's 92.9k / 86.1k). Row schema (one comparison)::

    {"info": {"id", "post", "title", "subreddit", "site", "article"},
     "summaries": [{"text", "policy", "note"}, {"text", "policy", "note"}],
     "choice": 0 | 1, "worker", "batch", "split", "extra": {"confidence"}}

Reddit rows have ``post`` and usually ``subreddit`` (a row whose ``subreddit`` is None gets a prompt without
the Subreddit line; their count is logged); CNN/DailyMail rows (2,284 of validation, the paper's
out-of-distribution test) have ``post = None`` and ``article`` set. The authors evaluate on all of
validation, CNN/DailyMail included, and so does the default; ``--tldr_cnndm drop`` leaves those rows out.
Either way the log gives their count. Prompts follow :mod:`dschat.data.formats`;
``chosen = summaries[choice].text``, ``rejected`` the other summary, both with one leading space. Splits:
``train``, ``validation``. Rows with an empty summary are skipped and counted.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ..errors import row_error
from ..formats import spaced_response, tldr_article_prompt, tldr_post_prompt
from ..hub import DatasetSource
from ..options import DataOptions
from ..records import Row, read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import SkipRow, convert_rows, nonempty_response

logger = logging.getLogger(__name__)

# refs/convert/parquet: "Update parquet files" (2023-08-17), the last commit that changed comparisons/*.parquet
# (later commits up to the head a4d82a1 only touch duckdb index files). Read from the hub's pages offline.
PARQUET_REVISION = "195fc27ff714b2aff32ab8aba9bbee1d35663700"
SOURCE = DatasetSource("openai/summarize_from_feedback", splits={"train": "train", "validation": "validation"},
                       repo="openai/summarize_from_feedback", revision=PARQUET_REVISION,
                       files={split: f"comparisons/{split}/0000.parquet" for split in ("train", "validation")})
SCHEMA = "summarize_from_feedback comparisons: info{post|article, subreddit}, summaries[2]{text}, choice"


def load_tldr_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                    options: DataOptions = DataOptions()) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path, eval_data_path, options.eval_holdout)
    log_row_kinds(rows, source, options)
    return convert_rows(rows, source, lambda record, label, number: tldr_pair(record, label, number, options),
                        logger)


def is_article(record: Dict[str, Any]) -> bool:
    info = record.get("info") or {}
    return info.get("post") is None and info.get("article") is not None


def log_row_kinds(rows: List[Row], source: str, options: DataOptions) -> None:
    """Report the CNN/DailyMail rows (kept or dropped) and the Reddit rows without a subreddit."""
    articles = sum(is_article(record) for _, record in rows)
    if articles:
        fate = ("dropped (--tldr_cnndm drop)" if options.tldr_cnndm == "drop"
                else "kept, as the authors evaluate (--tldr_cnndm drop for Reddit only)")
        logger.info("%s: %d of %d rows are CNN/DailyMail articles, %s", source, articles, len(rows), fate)
    no_subreddit = sum(1 for _, record in rows
                       if not is_article(record) and (record.get("info") or {}).get("subreddit") is None)
    if no_subreddit:
        logger.info("%s: %d Reddit rows have no subreddit; their prompts omit the Subreddit line",
                    source, no_subreddit)


def tldr_pair(record: Dict[str, Any], source: str, number: int,
              options: DataOptions = DataOptions()) -> PreferencePair:
    info = require_field(record, "info", dict, source, number, SCHEMA)
    summaries = require_field(record, "summaries", list, source, number, SCHEMA)
    choice = require_field(record, "choice", int, source, number, SCHEMA)
    if len(summaries) != 2 or choice not in (0, 1):
        raise row_error(source, number, f"expected 2 summaries and choice 0 or 1, got {len(summaries)} and {choice}")
    if options.tldr_cnndm == "drop" and is_article(record):
        raise SkipRow("CNN/DailyMail article (--tldr_cnndm drop)")
    texts = [require_field(summary, "text", str, source, number, SCHEMA) for summary in summaries]
    return PreferencePair(
        prompt=tldr_prompt(info, source, number),
        chosen=nonempty_response(spaced_response(texts[choice])),
        rejected=nonempty_response(spaced_response(texts[1 - choice])),
    )


def tldr_prompt(info: Dict[str, Any], source: str, number: int) -> str:
    if info.get("post") is not None:
        subreddit = info.get("subreddit")
        if subreddit is not None and not isinstance(subreddit, str):
            raise row_error(source, number, f"field 'subreddit' should be str or None, got {type(subreddit).__name__}")
        return tldr_post_prompt(subreddit, info["post"])
    if info.get("article") is not None:
        return tldr_article_prompt(info["article"])
    raise row_error(source, number, "info has neither 'post' (Reddit) nor 'article' (CNN/DailyMail)")


register(DatasetAdapter(name="tldr", load_pairs=load_tldr_pairs))
