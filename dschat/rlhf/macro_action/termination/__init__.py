"""Termination rules ζ of macro actions (paper §3.2.1, Appendix B.4), one module each, found by name through
the registry: ``build_termination(name, TerminationOptions(...))`` returns ``SegmentationBatch -> Segmentation``.
A new rule is one new module here with a ``@register_termination("name")`` line (:mod:`.registry` finds it).

Exports are lazy (:mod:`dschat.core.lazy`): the rule names (``available_terminations``) load without torch;
a rule's module is imported when the rule is built.
"""
from dschat.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "base": ("Segmentation", "SegmentationBatch", "TerminationRule"),
    "options": ("TerminationOptions",),
    "registry": ("available_terminations", "build_termination", "register_termination"),
    "ngram": ("ngram_segments",),
    "randomized": ("randomized_ngram_segments", "shuffled_length_table"),
    "ppl": ("ppl_segments",),
    "entropy": ("entropy_segments",),
    "step": ("step_segments",),
})
