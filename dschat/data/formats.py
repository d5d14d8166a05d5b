"""Prompt and response formats shared by the adapters (paper Appendix B.2 and Tables 11-14).

* TL;DR (Stiennon et al., 2020; paper Table 11 shows no title line)::

      POST\nSubreddit: r/{subreddit}\n{post}\nTL;DR:          Reddit rows
      POST\n{post}\nTL;DR:                                 Reddit rows whose subreddit is None
      ARTICLE\n{article}\nTL;DR:                           CNN/DailyMail rows (post is None)

* dialogue (HH-RLHF): the human-assistant template ``\n\nHuman: {text}\n\nAssistant:``;
* question answering (WebGPT): DeepSpeed-Chat's single-line template `` Human: {question} Assistant:``, as
  the authors trained on it (the HH-RLHF template with ``--webgpt_template hh``);
* program synthesis (APPS), as Hendrycks et al. (2021) build it: ``\nQUESTION:\n{question}``, then
  ``\n{starter_code}`` only when there is starter code, then ``\nUse Call-Based format`` (a ``fn_name`` is
  given) or ``\nUse Standard Input format``, then ``\nANSWER:\n``.

Natural-language responses are stored with exactly one leading space (``" " + text.strip()``), so prompt
and response concatenate into well-formed text; code responses are stored unchanged.
"""
from __future__ import annotations

from typing import Optional


def tldr_post_prompt(subreddit: Optional[str], post: str) -> str:
    subreddit_line = f"Subreddit: r/{subreddit}\n" if subreddit else ""
    return f"POST\n{subreddit_line}{post.strip()}\nTL;DR:"


def tldr_article_prompt(article: str) -> str:
    return f"ARTICLE\n{article.strip()}\nTL;DR:"


def human_assistant_prompt(text: str) -> str:
    return f"\n\nHuman: {text.strip()}\n\nAssistant:"


def dschat_prompt(text: str) -> str:
    """DeepSpeed-Chat's `` Human: {text} Assistant:`` (``raw_datasets.py``), the text unchanged."""
    return f" Human: {text} Assistant:"


def apps_prompt(question: str, starter_code: str, fn_name: Optional[str]) -> str:
    starter = f"\n{starter_code}" if starter_code else ""
    answer_format = "Use Call-Based format" if fn_name else "Use Standard Input format"
    return f"\nQUESTION:\n{question}{starter}\n{answer_format}\nANSWER:\n"


def spaced_response(text: str) -> str:
    """The response with one leading space and no surrounding whitespace; "" when it is blank."""
    stripped = text.strip()
    return f" {stripped}" if stripped else ""
