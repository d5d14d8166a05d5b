"""Choices in turning rows into records, where the authors' processing and a cleaner alternative differ.

The defaults reproduce the authors' code (DeepSpeed-Chat, as the paper's Table 4 counts fit); each
alternative is one flag (``dschat.stages.configs.DataArgs``):

* ``eval_holdout`` ("95,5"): train and evaluation weights of the held-out split of rows without an
  evaluation split (:mod:`dschat.data.holdout`);
* ``webgpt_ties`` ("keep"): a comparison with equal scores keeps answer 0 as chosen (DeepSpeed-Chat's
  ``score_0 >= score_1``; about a quarter of the rows), or ``drop`` leaves it out (counted and logged);
* ``webgpt_template`` ("dschat"): the prompt ``" Human: {question} Assistant:"`` of DeepSpeed-Chat, or ``hh``,
  the HH-RLHF template ``"\\n\\nHuman: {question}\\n\\nAssistant:"``;
* ``tldr_cnndm`` ("keep"): TL;DR validation's 2,284 CNN/DailyMail rows stay in evaluation (the authors' RM
  scores mix them in), or ``drop`` evaluates on Reddit posts only; the count is logged either way.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, get_args

from .errors import DataError
from .holdout import DEFAULT_HOLDOUT, parse_holdout

WebgptTies = Literal["keep", "drop"]
WebgptTemplate = Literal["dschat", "hh"]
TldrCnndm = Literal["keep", "drop"]
CHOICES = {"webgpt_ties": get_args(WebgptTies), "webgpt_template": get_args(WebgptTemplate),
           "tldr_cnndm": get_args(TldrCnndm)}


@dataclass(frozen=True)
class DataOptions:
    eval_holdout: str = DEFAULT_HOLDOUT
    webgpt_ties: WebgptTies = "keep"
    webgpt_template: WebgptTemplate = "dschat"
    tldr_cnndm: TldrCnndm = "keep"

    def __post_init__(self):
        parse_holdout(self.eval_holdout)
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise DataError(f"--{name} {value!r}: expected one of {', '.join(allowed)}")

    @classmethod
    def from_args(cls, args) -> "DataOptions":
        """The options set on ``args`` (a parsed namespace; attributes it lacks keep their defaults)."""
        return cls(**{field.name: getattr(args, field.name) for field in fields(cls) if hasattr(args, field.name)})
