"""The termination rule's options, torch-free: :class:`TerminationOptions` is what a rule reads, and holds each
default. The flags that set them (step 3's and the segmentation viewer's) are
``dschat.stages.configs.TerminationConfig``, whose defaults are these and whose ``termination_options`` is the one
translation from flags to options."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence


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
    turn_ngram: the turn rule's n-grams inside each turn; ``None``: one macro per turn.
    step_delimiter / step_min_tokens: the step rule's step boundary (a newline: one reasoning step a line) and the
        fewest tokens a step must have to end at a boundary (shorter steps run on into the next).
    """

    ngram: Optional[int] = 1
    lengths: Sequence[int] = (2, 3, 5, 10)
    repeat: int = 3
    seed: int = 0
    parser: str = "auto"
    parser_cutoff: int = 5
    entropy_quantile: float = 0.2
    entropy_threshold: Optional[float] = None
    turn_ngram: Optional[int] = None
    step_delimiter: str = "\n"
    step_min_tokens: int = 4
