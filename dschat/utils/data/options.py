"""Choices in turning rows into records, where the authors' processing and a cleaner alternative differ.

The defaults reproduce the authors' code (DeepSpeed-Chat, as the paper's Table 4 counts fit); each
alternative is one flag (``dschat.utils.config.add_data_args``):

* ``eval_holdout`` ("95,5"): train and evaluation weights of the held-out split of rows without an
  evaluation split (:mod:`dschat.utils.data.holdout`);
* ``webgpt_ties`` ("keep"): a comparison with equal scores keeps answer 0 as chosen (DeepSpeed-Chat's
  ``score_0 >= score_1``; about a quarter of the rows), or ``drop`` leaves it out (counted and logged);
* ``webgpt_template`` ("dschat"): the prompt ``" Human: {question} Assistant:"`` of DeepSpeed-Chat, or ``hh``,
  the HH-RLHF template ``"\\n\\nHuman: {question}\\n\\nAssistant:"``;
* ``tldr_cnndm`` ("keep"): TL;DR validation's 2,284 CNN/DailyMail rows stay in evaluation (the authors' RM
  scores mix them in), or ``drop`` evaluates on Reddit posts only; the count is logged either way.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import DataError
from .holdout import DEFAULT_HOLDOUT, parse_holdout

CHOICES = {
    "webgpt_ties": ("keep", "drop"),
    "webgpt_template": ("dschat", "hh"),
    "tldr_cnndm": ("keep", "drop"),
}


@dataclass(frozen=True)
class DataOptions:
    eval_holdout: str = DEFAULT_HOLDOUT
    webgpt_ties: str = "keep"
    webgpt_template: str = "dschat"
    tldr_cnndm: str = "keep"

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
