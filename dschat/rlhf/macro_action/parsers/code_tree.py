"""Statement trees of Python code for the parsing rule on program synthesis (paper Appendix D.2: "a
programming-language-based parser"; the review discussion's APPS example cuts one macro per statement).

Tree shape: the module root holds the top-level statements; a simple statement is a leaf; a compound
statement (``def``, ``class``, ``if``, ``for``, ``while``, ``try``, ``with``, ``match``, their ``async``
forms) is a node whose children are its *header* (``def f(x):``, including decorators) as a leaf, then its
body statements, and clause headers (``else:``, ``except E:``, ``finally:``, ``case p:``) as leaves or
clause nodes in source order. Non-whitespace text between statements that no statement covers (comments,
``;``) becomes a leaf of its own.

Parsers, in order:

1. Python's ``ast`` — exact spans for every Python 3 syntax (walrus, positional-only ``/``, ``match``, async
   comprehensions, none of which RedBaron parses) in well under a millisecond. It is the primary parser
   because RedBaron is slow: its node positions (``absolute_bounding_box``) cost ~9 ms per statement and grow
   with depth (a 24-line function, 25 statements: 222 ms), and even the faster span search below takes
   ~18 ms per generated 20-line solution against ~0.3 ms for ``ast`` (both give identical trees).
2. RedBaron — for code ``ast`` rejects that RedBaron accepts (Python 2 syntax: ``print x``, backticks,
   ``<>``). Each node's source is rendered by baron from its syntax tree and searched for in the text after
   the previous node (a header is the node rendered without its body); every match is checked, because
   RedBaron's own renderings can be wrong (a body list after two if/else blocks) and ``node.else_`` on a
   node without an ``else`` clause searches its descendants.
3. A response cut at the maximum length usually ends mid-statement: the longest prefix of whole lines that
   ``ast`` accepts is parsed and the unparsable rest becomes one leaf. A response whose first line already
   fails has no tree (the parsing rule then falls back to token-level macros).

``ast`` columns are UTF-8 byte offsets; they are converted to character offsets (multibyte text is exact).
"""
from __future__ import annotations

import ast
import re
import warnings
from typing import List, Sequence

from .tree import Node, ParseError, TreeProvider, branch, leaf

_NEWLINE = re.compile(r"\r\n?|\n")
_BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")
_MAX_PREFIX_ATTEMPTS = 16


class _Offsets:
    """Converts ``ast`` (1-based line, UTF-8 byte column) positions to character offsets in ``text``."""

    def __init__(self, text: str):
        self.text = text
        self.ascii = text.isascii()
        self.line_starts = [0] + [match.end() for match in _NEWLINE.finditer(text)]

    def char(self, lineno: int, col_bytes: int) -> int:
        start = self.line_starts[lineno - 1]
        if self.ascii:
            return start + col_bytes
        line_end = self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.text)
        return start + len(self.text[start:line_end].encode("utf-8")[:col_bytes].decode("utf-8"))

    def span(self, node: ast.AST) -> tuple:
        return (self.char(node.lineno, node.col_offset), self.char(node.end_lineno, node.end_col_offset))


def _trimmed_leaf(text: str, start: int, end: int, label: str):
    """A leaf over ``text[start:end]`` without its surrounding whitespace, or None if it is all whitespace."""
    chunk = text[start:end]
    stripped = chunk.strip()
    if not stripped:
        return None
    offset = start + chunk.index(stripped[0])
    return leaf(offset, offset + len(stripped), label)


def with_gap_leaves(text: str, start: int, end: int, children: Sequence[Node], label: str) -> Node:
    """A node over ``[start, end)`` holding ``children`` plus one leaf per non-whitespace stretch between them
    (a compound statement's header and clause keywords, comments, semicolons)."""
    parts: List[Node] = []
    cursor = start
    for child in sorted(children, key=lambda node: node.start):
        gap = _trimmed_leaf(text, cursor, child.start, "header" if cursor == start else "gap")
        parts += [gap] if gap is not None else []
        parts.append(child)
        cursor = max(cursor, child.end)
    tail = _trimmed_leaf(text, cursor, end, "gap")
    parts += [tail] if tail is not None else []
    if not parts:
        raise ParseError("no statements")
    return branch(parts, label)


def _ast_children(node: ast.AST) -> List[ast.AST]:
    """The statements, ``except`` handlers and ``case`` clauses directly inside ``node``."""
    return [child for field in _BLOCK_FIELDS for child in getattr(node, field, None) or ()]


def _ast_node(node: ast.AST, offsets: _Offsets) -> Node:
    """The tree of one statement / handler / case clause."""
    label = type(node).__name__
    inner = [_ast_node(child, offsets) for child in _ast_children(node)]
    if isinstance(node, ast.match_case):
        pattern_start = offsets.char(node.pattern.lineno, node.pattern.col_offset)
        start = offsets.text.rfind("case", 0, pattern_start)
        if start < 0:
            raise ParseError("a match clause without its 'case' keyword")
        return with_gap_leaves(offsets.text, start, inner[-1].end, inner, label)
    start, end = offsets.span(node)
    decorators = getattr(node, "decorator_list", None)
    if decorators:
        start = offsets.text.rfind("@", 0, offsets.char(decorators[0].lineno, decorators[0].col_offset))
    if not inner:
        return leaf(start, end, label)
    return with_gap_leaves(offsets.text, start, end, inner, label)


def ast_tree(text: str) -> Node:
    """The statement tree of ``text`` from Python's ``ast``; SyntaxError if ``ast`` rejects it."""
    try:
        with warnings.catch_warnings():  # e.g. invalid escape sequences in generated code
            warnings.simplefilter("ignore", SyntaxWarning)
            module = ast.parse(text)
    except ValueError as error:  # e.g. null bytes
        raise SyntaxError(str(error)) from None
    offsets = _Offsets(text)
    return with_gap_leaves(text, 0, len(text), [_ast_node(stmt, offsets) for stmt in module.body], "Module")


_RB_COMPOUND = {"DefNode", "ClassNode", "ForNode", "WhileNode", "IfelseblockNode", "IfNode", "ElifNode",
                "ElseNode", "TryNode", "ExceptNode", "FinallyNode", "WithNode"}


def _rb_parts(node) -> list:
    """The statements and clauses of a RedBaron compound node, in source order. Clause attributes are read
    only where the node's syntax tree has them: elsewhere RedBaron answers ``node.else_`` with a search of
    the node's descendants."""
    keys = node.fst().keys()
    parts = list(node.value)
    parts += list(node.excepts) if "excepts" in keys else []
    parts += [node.else_] if "else" in keys and node.else_ else []
    parts += [node.finally_] if "finally" in keys and node.finally_ else []
    return parts


def _rb_source(node) -> str:
    """A node's source rendered by baron from its syntax tree."""
    import baron

    return baron.dumps([node.fst()])


def _rb_header_source(node) -> str:
    """The source of a compound node's header: the node rendered by baron without its body and clauses
    (RedBaron's own ``value.dumps()`` re-renders bodies unfaithfully, e.g. after two if/else blocks)."""
    if type(node).__name__ == "IfelseblockNode":
        return ""
    import baron

    fst = dict(node.fst(), value=[])
    fst.update({key: [] if key == "excepts" else {} for key in ("excepts", "else", "finally") if key in fst})
    return baron.dumps([fst])


def _rb_block(nodes, text: str, cursor: int, limit: int) -> List[Node]:
    """Trees of consecutive RedBaron nodes, each located by its exact source from ``cursor`` on; ParseError if
    a node's source is not next in the text (RedBaron has rendering bugs: never trust it unchecked)."""
    out = []
    for node in nodes:
        source = _rb_source(node)
        if not source.strip():  # blank-line nodes
            continue
        start = text.find(source, cursor, limit)
        if start < 0 or text[cursor:start].strip():
            raise ParseError(f"RedBaron node {type(node).__name__} not found where expected")
        out.append(_rb_node(node, text, start, source))
        cursor = start + len(source)
    return out


def _rb_node(node, text: str, start: int, source: str) -> Node:
    """The tree of one RedBaron node whose ``source`` starts at ``start``; spans exclude surrounding spaces."""
    label = type(node).__name__
    span_start = start + len(source) - len(source.lstrip())
    span_end = start + len(source.rstrip())
    if label not in _RB_COMPOUND:
        return leaf(span_start, span_end, label)
    header = _rb_header_source(node)
    if not source.startswith(header):
        raise ParseError(f"RedBaron {label} does not start with its header")
    children = _rb_block(_rb_parts(node), text, start + len(header), start + len(source))
    return with_gap_leaves(text, span_start, span_end, children, label)


def redbaron_tree(text: str) -> Node:
    """The statement tree of ``text`` from RedBaron (Python 2 and 3 syntax up to 3.7); ParseError if it fails."""
    from redbaron import RedBaron

    try:
        return with_gap_leaves(text, 0, len(text), _rb_block(RedBaron(text), text, 0, len(text)), "Module")
    except ParseError:
        raise
    except Exception as error:  # baron raises its own parsing/grouping errors, RedBaron attribute errors
        raise ParseError(f"RedBaron cannot parse the code: {type(error).__name__}") from None


def prefix_tree(text: str) -> Node:
    """The tree of the longest whole-line prefix ``ast`` accepts, plus the rest as one ``unparsed`` leaf
    (a response truncated at the length limit); ParseError if no non-empty prefix parses."""
    line_starts = _Offsets(text).line_starts
    cut = len(text)
    for _ in range(_MAX_PREFIX_ATTEMPTS):
        try:
            prefix = ast_tree(text[:cut])
        except SyntaxError as error:
            error_line = min(error.lineno or len(line_starts), len(line_starts))
            last_line_start = max(start for start in line_starts if start < cut)
            cut = min(line_starts[error_line - 1], last_line_start)  # drop at least one more line
            if not text[:cut].strip():
                break
            continue
        rest = _trimmed_leaf(text, cut, len(text), "unparsed")
        return branch(list(prefix.children) + ([rest] if rest is not None else []), "Module")
    raise ParseError("no prefix of the code parses")


class CodeTreeProvider(TreeProvider):
    """Python statement trees: ``ast``, then RedBaron, then the longest parsable prefix (module docstring)."""

    name = "code"

    def parse(self, text: str) -> Node:
        try:
            return ast_tree(text)
        except (SyntaxError, RecursionError, MemoryError):
            pass
        try:
            return redbaron_tree(text)
        except ParseError:
            return prefix_tree(text)
