"""Randomized n-gram termination (paper §3.2.1 (b), Appendix B.4 rule 2).

The length list (default ``{2, 3, 5, 10}``) is repeated ``repeat`` times (3 in the paper), shuffled
independently for each sample, and consumed in order along the response; response tokens left over once the
whole list is used form one final macro (the paper's "large number" standing for |ω| = ∞).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..segments import as_action_mask, segments_from_lengths
from .base import Segmentation, SegmentationBatch, TerminationRule
from .options import TerminationOptions
from .registry import register_termination


def check_length_list(lengths: Sequence[int], repeat: int) -> None:
    """Raise ValueError unless ``lengths`` is a non-empty list of integers >= 1 and ``repeat`` an integer >= 1."""
    if len(lengths) == 0 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in lengths):
        raise ValueError(f"lengths must be a non-empty list of integers >= 1, got {list(lengths)!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")


def shuffled_length_table(batch_size: int, lengths: Sequence[int] = (2, 3, 5, 10), repeat: int = 3,
                          generator: Optional[torch.Generator] = None,
                          device: Optional[torch.device] = None) -> torch.Tensor:
    """``[B, len(lengths) * repeat]`` long: for each sample, ``lengths`` repeated ``repeat`` times and shuffled.

    One random key per entry is drawn from ``generator`` (on the generator's device) and each row is sorted
    by its keys: an independent uniform permutation per sample, with no loop over the batch.
    """
    check_length_list(lengths, repeat)
    repeated = torch.tensor(list(lengths), dtype=torch.long).repeat(repeat)
    key_device = generator.device if generator is not None else torch.device("cpu")
    keys = torch.rand(batch_size, repeated.numel(), generator=generator, device=key_device)
    table = repeated.to(key_device)[keys.argsort(dim=1)]
    return table.to(device) if device is not None else table


def randomized_ngram_segments(action_mask: torch.Tensor, lengths: Sequence[int] = (2, 3, 5, 10), repeat: int = 3,
                              generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Segment ids of randomized n-grams: each row consumes its own shuffled length table
    (:func:`shuffled_length_table`); leftover tokens are one final macro."""
    on = as_action_mask(action_mask)
    table = shuffled_length_table(on.shape[0], lengths, repeat, generator, on.device)
    return segments_from_lengths(on, table)


class RandomizedNgramRule:
    """Randomized n-gram rule over ``lengths`` × ``repeat`` with its own generator, seeded once and advancing
    with every batch. Its generator state is part of a checkpoint (``state_dict``), so a resumed run cuts
    exactly as an uninterrupted one."""

    def __init__(self, lengths: Sequence[int], repeat: int, seed: int):
        check_length_list(lengths, repeat)
        self.lengths, self.repeat = lengths, repeat
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, batch: SegmentationBatch) -> Segmentation:
        segment_ids = randomized_ngram_segments(batch.action_mask, self.lengths, self.repeat, self.generator)
        return Segmentation(segment_ids, torch.zeros(segment_ids.shape[0], dtype=torch.bool, device=segment_ids.device))

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


@register_termination("randomized")
def build_randomized_ngram(options: TerminationOptions) -> TerminationRule:
    """Randomized n-gram rule over ``options.lengths`` × ``options.repeat``, seeded with ``options.seed``
    (give each data-parallel rank its own seed)."""
    return RandomizedNgramRule(options.lengths, options.repeat, options.seed)
