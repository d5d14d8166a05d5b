"""Plain data across the process boundary between a HumanEval program and its verdict interpreter.

A value is *plain data* when it is built only of exact ``None``, ``bool``, ``int``, ``float``, ``complex``,
``str``, ``bytes`` and ``list``, ``tuple``, ``set``, ``frozenset``, ``dict`` of them; numbers of other types
(numpy scalars, ``int`` subclasses) are converted by value and ``str`` subclasses to ``str`` on encoding, anything
else raises :class:`NotPlainData`. The text is one JSON line in which every node is a list ``[tag, payload...]``,
so no JSON type is ambiguous (tuples stay tuples, dict keys keep their types); integers travel in hexadecimal and
floats as ``float.hex`` (exact, linear-time both ways whatever the size, ``inf``/``nan`` included).

:func:`decode` is what the verdict interpreter applies to bytes written by the program's process: the line length
and the bracket nesting are checked before parsing, and anything that is not a well-formed encoding raises
:class:`NotPlainData`, never another exception. Imported by the sandbox's child scripts as a top-level module, so
standard library only.
"""
from __future__ import annotations

import json
import numbers
import re

MAX_DEPTH = 100  # containers inside containers; HumanEval's values nest at most 3 deep
_JSON_LEVELS_PER_DEPTH = 3  # [tag, [ [key, value], ... ]]: a dict adds three bracket levels
_STRING_LITERAL = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")
_ATOM_TAGS = {type(None): "N", bool: "B", str: "s"}
_SEQUENCE_TAGS = {list: "l", tuple: "t", set: "S", frozenset: "z"}
_SEQUENCE_TYPES = {tag: kind for kind, tag in _SEQUENCE_TAGS.items()}


class NotPlainData(ValueError):
    """A value (or a text) that is not plain data in the sense of this module."""


def nesting_depth(text: bytes) -> int:
    """How deep brackets nest in a JSON text, string contents ignored (linear time, no recursion)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING_LITERAL.sub(b'""', text)):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def encode(value, max_depth: int = MAX_DEPTH) -> str:
    """The JSON text of a plain-data ``value`` (one line); raises :class:`NotPlainData` for anything else."""
    return json.dumps(_tree(value, max_depth), separators=(",", ":"))


def _tree(value, depth: int):
    kind = type(value)
    if kind in _ATOM_TAGS:
        return [_ATOM_TAGS[kind], value]
    if kind is int:
        return ["i", format(value, "x")]
    if kind is float:
        return ["f", value.hex()]
    if kind is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if kind is bytes:
        return ["b", value.hex()]
    if kind in _SEQUENCE_TAGS or kind is dict:
        if depth <= 0:
            raise NotPlainData(f"a value nested more than {MAX_DEPTH} deep")
        if kind is dict:
            return ["d", [[_tree(key, depth - 1), _tree(item, depth - 1)] for key, item in value.items()]]
        return [_SEQUENCE_TAGS[kind], [_tree(item, depth - 1) for item in value]]
    if issubclass(kind, numbers.Integral):  # numpy integers, int subclasses: by value (the type, never the
        return _tree(int(value), depth)  # __class__ an object claims)
    if issubclass(kind, numbers.Real):
        return _tree(float(value), depth)
    if issubclass(kind, str):
        return ["s", str.__str__(value)]
    raise NotPlainData(f"a {kind.__name__!r} is not plain data")


def decode(text: bytes, max_depth: int = MAX_DEPTH):
    """The value encoded by :func:`encode` in ``text``; :class:`NotPlainData` for anything else."""
    if nesting_depth(text) > _JSON_LEVELS_PER_DEPTH * max_depth + 2:
        raise NotPlainData(f"nested more than {max_depth} deep")
    try:
        return _value(json.loads(text))
    except NotPlainData:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError, MemoryError) as error:
        raise NotPlainData(f"malformed plain data ({type(error).__name__})") from None


def _value(node):
    if type(node) is not list or not node or type(node[0]) is not str:
        raise NotPlainData("malformed plain data")
    tag, payload = node[0], node[1:]
    if tag == "N" and payload == [None]:
        return None
    if tag == "B" and len(payload) == 1 and type(payload[0]) is bool:
        return payload[0]
    if tag == "s" and len(payload) == 1 and type(payload[0]) is str:
        return payload[0]
    if tag in ("i", "f", "b") and len(payload) == 1 and type(payload[0]) is str:
        text = payload[0]
        return int(text, 16) if tag == "i" else float.fromhex(text) if tag == "f" else bytes.fromhex(text)
    if tag == "c" and len(payload) == 2 and all(type(part) is str for part in payload):
        return complex(float.fromhex(payload[0]), float.fromhex(payload[1]))
    if len(payload) == 1 and type(payload[0]) is list:
        if tag in _SEQUENCE_TYPES:
            return _SEQUENCE_TYPES[tag](_value(item) for item in payload[0])
        if tag == "d" and all(type(pair) is list and len(pair) == 2 for pair in payload[0]):
            return {_value(key): _value(item) for key, item in payload[0]}
    raise NotPlainData("malformed plain data")
