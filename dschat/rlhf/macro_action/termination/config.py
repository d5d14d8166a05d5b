"""The termination rule's options and flags, torch-free: :class:`TerminationOptions` is what a rule reads (and
holds each default), :class:`TerminationConfig` the flags step 3 and the segmentation viewer take (same names,
checks and defaults: the defaults are :class:`TerminationOptions`'s), and
:meth:`TerminationConfig.termination_options` the one translation from flags to options."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Optional, Sequence, Tuple

from dschat.utils.config import Fraction, NonNegativeFloat, OneOf, Parse, PositiveInt

from .registry import available_terminations


@dataclass
class TerminationOptions:
    """Every option any registered rule reads; each rule ignores the ones it does not need.

    ngram: fixed n-gram length; ``None`` means one macro for the whole response (n → ∞), 1 is token-level PPO.
    lengths / repeat: randomized n-gram length list and how often it is repeated (paper §B.4: (2,3,5,10) × 3).
    seed: seed of the randomized rule's generator.
    parser: tree provider for the parsing rule: ``auto | spacy | benepar | code``.
    parser_cutoff: C of the parsing rule (paper §B.4: 5).
    entropy_quantile / entropy_threshold: the entropy rule's forks, the top-q tokens of each response or, when
        the threshold (nats) is set, every token at or above it.
    """

    ngram: Optional[int] = 1
    lengths: Sequence[int] = (2, 3, 5, 10)
    repeat: int = 3
    seed: int = 0
    parser: str = "auto"
    parser_cutoff: int = 5
    entropy_quantile: float = 0.2
    entropy_threshold: Optional[float] = None


def ngram_length(text: str) -> Optional[int]:
    """``--ngram``: a positive integer, or 0 / inf for one macro per response (None; ``none`` is read before, as
    for every optional flag). A ValueError becomes the flag's one-line error."""
    if str(text).lower() in ("0", "inf"):
        return None
    value = int(text)
    if value < 1:
        raise ValueError
    return value


@dataclass
class TerminationConfig:
    """macro actions (§3.2.1, §B.4)"""

    termination: Annotated[str, OneOf(available_terminations)] = "fixed"
    """Termination rule ζ (§3.2.1): a module of dschat/rlhf/macro_action/termination/; with --ngram 1 MA-PPO is
    token-level PPO."""
    ngram: Annotated[Optional[int], Parse(ngram_length, "a positive integer, or 0 / inf (n → ∞)")] = \
        TerminationOptions.ngram
    """n of the fixed n-gram rule: 1 = vanilla PPO; 0 / inf = the whole response is one macro (n → ∞)."""
    random_lengths: Tuple[PositiveInt, ...] = tuple(TerminationOptions.lengths)
    """Length list of the randomized n-gram rule (space- or comma-separated)."""
    random_repeat: PositiveInt = TerminationOptions.repeat
    """Repeats of the length list in the randomized rule's table."""
    parser: Literal["auto", "spacy", "benepar", "code"] = TerminationOptions.parser
    """Parsing rule's parser (auto = code with --reward code, else spacy/benepar)."""
    parser_cutoff: PositiveInt = TerminationOptions.parser_cutoff
    """C of the parsing rule."""
    entropy_quantile: Fraction = TerminationOptions.entropy_quantile
    """Entropy rule: a macro ends after each of the top-q highest-entropy tokens of its response (forks)."""
    entropy_threshold: Optional[NonNegativeFloat] = TerminationOptions.entropy_threshold
    """Entropy rule: a macro ends after every token whose policy entropy is at least this (nats); replaces
    --entropy_quantile when set."""

    def termination_options(self, seed: int, code: bool = False) -> TerminationOptions:
        """The rule options of these flags: ``seed`` for rules that draw random numbers (step 3 gives each process
        its own), and ``--parser auto`` parses Python (statement-level macros) when the responses are programs
        (``code``)."""
        parser = "code" if self.parser == "auto" and code else self.parser
        return TerminationOptions(ngram=self.ngram, lengths=tuple(self.random_lengths), repeat=self.random_repeat,
                                  seed=seed, parser=parser, parser_cutoff=self.parser_cutoff,
                                  entropy_quantile=self.entropy_quantile, entropy_threshold=self.entropy_threshold)
