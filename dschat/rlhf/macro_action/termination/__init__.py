"""Termination rules ζ of macro actions (paper §3.2.1, Appendix B.4), one module each, found by name through
the registry: ``build_termination(name, TerminationOptions(...))`` returns ``SegmentationBatch -> Segmentation``.

Importing this package imports every rule module so that their ``@register_termination`` lines run.
"""
from .base import Segmentation, SegmentationBatch, TerminationOptions, TerminationRule
from .registry import available_terminations, build_termination, register_termination
from .ngram import ngram_segments
from .randomized import randomized_ngram_segments, shuffled_length_table
from .ppl import ppl_segments
from .entropy import entropy_segments
from . import parsing  # noqa: F401

__all__ = [
    "Segmentation", "SegmentationBatch", "TerminationOptions", "TerminationRule",
    "available_terminations", "build_termination", "register_termination",
    "ngram_segments", "randomized_ngram_segments", "shuffled_length_table", "ppl_segments",
    "entropy_segments",
]
