"""The tiny syntax-tree type every tree provider returns (paper §3.2.1 and Appendix B.4: the parsing rule walks
a constituency tree depth-first).

A :class:`Node` covers the characters ``[start, end)`` of the parsed text; its children are ordered by
``start``. A node without children is a *leaf*: a word of the text parser or a statement/header of the code
parser. Spans never include the whitespace between leaves; the parsing rule decides where whitespace goes.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterator, Sequence, Tuple


class ParseError(ValueError):
    """A text the provider cannot turn into a tree; the parsing rule falls back to token-level macros."""


@dataclass(frozen=True)
class Node:
    """A tree node over the characters ``[start, end)`` of the parsed text, with an optional label."""

    start: int
    end: int
    children: Tuple["Node", ...] = ()
    label: str = ""

    @property
    def is_leaf(self) -> bool:
        return not self.children


def leaf(start: int, end: int, label: str = "") -> Node:
    """A node without children."""
    return Node(start, end, (), label)


def branch(children: Sequence[Node], label: str = "") -> Node:
    """A node spanning its children (sorted by start); raises ParseError when there are none."""
    if not children:
        raise ParseError(f"node {label!r} has no children")
    ordered = tuple(sorted(children, key=lambda node: (node.start, node.end)))
    return Node(ordered[0].start, max(node.end for node in ordered), ordered, label)


def leaves(root: Node) -> Iterator[Node]:
    """The leaves of ``root`` from left to right (iterative, so deep trees cannot overflow the stack)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_leaf:
            yield node
        else:
            stack.extend(reversed(node.children))


def check_spans(root: Node, text_length: int) -> Node:
    """``root`` unchanged if every span lies inside ``[0, text_length]`` and is non-empty; ParseError otherwise
    (a provider whose offsets drifted must not silently misplace macro boundaries)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if not 0 <= node.start < node.end <= text_length:
            raise ParseError(f"span [{node.start}, {node.end}) of node {node.label!r} is outside the text "
                             f"[0, {text_length})")
        stack.extend(node.children)
    return root


class TreeProvider(abc.ABC):
    """Turns response texts into :class:`Node` trees. Subclasses implement :meth:`parse`; providers with a
    faster batched path (spaCy's ``nlp.pipe``) override :meth:`parse_many`."""

    name = "tree"

    @abc.abstractmethod
    def parse(self, text: str) -> Node:
        """The tree of ``text`` (non-empty, not only whitespace); raises ParseError if it has none."""

    def parse_many(self, texts: Sequence[str]) -> list:
        """One tree per text, ``None`` where the text cannot be parsed (paper §B.4: that sample falls back
        to token-level macros). Any parser exception counts as a failure: a training step never crashes on
        one odd sample."""
        return [self._parse_or_none(text) for text in texts]

    def _parse_or_none(self, text: str):
        try:
            return check_spans(self.parse(text), len(text))
        except Exception:  # third-party parsers raise anything; the sample falls back, the batch goes on
            return None
