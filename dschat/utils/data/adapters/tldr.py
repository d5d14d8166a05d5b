"""TL;DR summarisation preferences: ``openai/summarize_from_feedback``, config ``comparisons``.

Hub row schema (one comparison)::

    {"info": {"id", "post", "title", "subreddit", "site", "article"},
     "summaries": [{"text", "policy", "note"}, {"text", "policy", "note"}],
     "choice": 0 | 1, "worker", "batch", "split", "extra"}

Reddit rows have ``post`` and ``subreddit``; CNN/DailyMail rows (validation only, the paper's
out-of-distribution test) have ``post = None`` and ``article`` set. Prompts follow
:mod:`dschat.utils.data.formats`; ``chosen = summaries[choice].text``, ``rejected`` the other summary, both
with one leading space. Splits: ``train``, ``validation``. Rows with an empty summary are skipped and counted.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ..errors import row_error
from ..formats import spaced_response, tldr_article_prompt, tldr_post_prompt
from ..records import HubSource, read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import convert_rows, nonempty_response

logger = logging.getLogger(__name__)

SOURCE = HubSource("openai/summarize_from_feedback", config="comparisons",
                   splits={"train": "train", "validation": "validation"})
SCHEMA = "summarize_from_feedback comparisons: info{post|article, subreddit}, summaries[2]{text}, choice"


def load_tldr_pairs(split: str = "train", data_path: Optional[str] = None) -> List[PreferencePair]:
    source, rows = read_rows(SOURCE, split, data_path)
    return convert_rows(rows, source, tldr_pair, logger)


def tldr_pair(record: Dict[str, Any], source: str, number: int) -> PreferencePair:
    info = require_field(record, "info", dict, source, number, SCHEMA)
    summaries = require_field(record, "summaries", list, source, number, SCHEMA)
    choice = require_field(record, "choice", int, source, number, SCHEMA)
    if len(summaries) != 2 or choice not in (0, 1):
        raise row_error(source, number, f"expected 2 summaries and choice 0 or 1, got {len(summaries)} and {choice}")
    texts = [require_field(summary, "text", str, source, number, SCHEMA) for summary in summaries]
    return PreferencePair(
        prompt=tldr_prompt(info, source, number),
        chosen=nonempty_response(spaced_response(texts[choice])),
        rejected=nonempty_response(spaced_response(texts[1 - choice])),
    )


def tldr_prompt(info: Dict[str, Any], source: str, number: int) -> str:
    if info.get("post") is not None:
        subreddit = require_field(info, "subreddit", str, source, number, SCHEMA)
        return tldr_post_prompt(subreddit, info["post"])
    if info.get("article") is not None:
        return tldr_article_prompt(info["article"])
    raise row_error(source, number, "info has neither 'post' (Reddit) nor 'article' (CNN/DailyMail)")


register(DatasetAdapter(name="tldr", load_pairs=load_tldr_pairs))
