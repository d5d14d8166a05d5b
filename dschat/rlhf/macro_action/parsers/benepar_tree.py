"""Constituency trees from benepar — the parser of the paper's parsing rule (§3.2.1, Appendix B.4).

spaCy tokenises the text and splits sentences (its offsets are exact); benepar parses each sentence's
non-whitespace words; :func:`tree_from_nltk` maps the i-th leaf of benepar's ``nltk.Tree`` to the i-th word's
character span (by position, never by string matching, so PTB escapes such as ``-LRB-`` cannot misalign).
Nothing here downloads: the trained model ``benepar_en3`` must already be installed (``benepar.download``
needs a host that is not reachable everywhere), or a saved parser can be given by path.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Iterator, List, Optional, Sequence, Tuple

from dschat.core.config import ConfigError

from .spacy_tree import load_spacy
from .tree import Node, ParseError, TreeProvider, branch, leaf

BENEPAR_MODEL = "benepar_en3"

Span = Tuple[int, int]


def benepar_model_installed(model: str = BENEPAR_MODEL) -> bool:
    """True if ``model`` is a saved parser path or an installed benepar model; looks only on disk."""
    if os.path.exists(model):
        return True
    try:
        import nltk.data
    except ImportError:
        return False
    try:
        nltk.data.find(f"models/{model}")
    except LookupError:
        return False
    return True


def benepar_missing() -> Optional[str]:
    """None when the benepar package and its model :data:`BENEPAR_MODEL` are installed (looking on disk, loading
    nothing); else the one line saying which is not (``--parser benepar``'s start-up refusal)."""
    if importlib.util.find_spec("benepar") is None:
        return "--parser benepar: the benepar package is not installed (pip install benepar); or use --parser spacy"
    if not benepar_model_installed():
        return (f"--parser benepar: benepar's model {BENEPAR_MODEL} is not installed (nothing is downloaded here; on "
                f"a machine with network: python -c \"import benepar; benepar.download('{BENEPAR_MODEL}')\"); or use "
                "--parser spacy")
    return None


def tree_from_nltk(tree, word_spans: Sequence[Span]) -> Node:
    """Convert a benepar/nltk tree whose leaves are the words of ``word_spans`` (in order) to a :class:`Node`
    tree; a preterminal ``(TAG word)`` becomes a leaf labelled ``TAG``. ParseError if the leaf count differs
    from the number of words."""
    spans: Iterator[Span] = iter(word_spans)

    def build(subtree) -> Node:
        if isinstance(subtree, str):
            start, end = next(spans)
            return leaf(start, end)
        children = [build(child) for child in subtree]
        if len(subtree) == 1 and isinstance(subtree[0], str):
            return leaf(children[0].start, children[0].end, subtree.label())
        return branch(children, subtree.label())

    try:
        root = build(tree)
    except StopIteration:
        raise ParseError("the constituency tree has more leaves than the sentence has words") from None
    if next(spans, None) is not None:
        raise ParseError("the constituency tree has fewer leaves than the sentence has words")
    return root


class BeneparTreeProvider(TreeProvider):
    """Text trees from benepar constituency parses (``model``: an installed model name or a saved parser)."""

    name = "benepar"

    def __init__(self, model: str = BENEPAR_MODEL, spacy_model: Optional[str] = None, batch_size: int = 64):
        missing = benepar_missing() if model == BENEPAR_MODEL else None  # the start-up check's line
        if missing:
            raise ConfigError(missing)
        if not benepar_model_installed(model):
            raise ConfigError(f"benepar model {model}: not a saved parser nor an installed model")
        import benepar

        self._benepar = benepar
        self.parser = benepar.Parser(model, batch_size=batch_size)
        self.nlp = load_spacy(spacy_model)

    def parse(self, text: str) -> Node:
        return self.doc_tree(self.nlp(text))

    def doc_tree(self, doc) -> Node:
        """One constituency tree per spaCy sentence under a ``doc`` root."""
        sentences: List[List] = [[token for token in sent if not token.is_space] for sent in doc.sents]
        sentences = [words for words in sentences if words]
        if not sentences:
            raise ParseError("spaCy found no words")
        inputs = [self._benepar.InputSentence(words=[token.text for token in words],
                                              space_after=[bool(token.whitespace_) for token in words])
                  for words in sentences]
        trees = self.parser.parse_sents(inputs)
        return branch([tree_from_nltk(tree, [(token.idx, token.idx + len(token.text)) for token in words])
                       for tree, words in zip(trees, sentences)], "doc")
