"""Command lines generated from config dataclasses (as TRL's ``HfArgumentParser`` and simple-parsing do), and
layered YAML configs checked exactly like the command line.

A stage declares one dataclass; each field is one flag: its type (with an optional ``Range``, ``Literal``
choices, or a ``Parse`` function) says how a value is read and checked, its default is the flag's default and its
docstring (the string literal under the field) is the flag's help. Adding a documented field adds a flag.

``--config file.yaml`` (repeatable, later files win) sets values that explicit flags override. A YAML file may
``inherit:`` other files (paths relative to it), so configs layer base -> model -> task and each layer holds only
what differs. Every YAML value goes through the flag's own parser and range check, and every bad value, flag or
file ends in one :class:`ConfigError` line naming the flag or the file and key.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import logging
import os
import re
import sys
import textwrap
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from dschat.core.entrypoint import ArgumentParser, did_you_mean, explain_usage_error

logger = logging.getLogger(__name__)

class ConfigError(ValueError):
    """A config file or flag is invalid; the message names the file or flag and what was expected."""


# ---------------------------------------------------------------------------------------------- field markers


@dataclasses.dataclass(frozen=True)
class Range:
    """Inclusive bounds of a numeric field (``None`` = unbounded); ``open_low`` excludes ``low`` itself."""

    low: Optional[float] = None
    high: Optional[float] = None
    open_low: bool = False

    def describe(self) -> str:
        low = None if self.low is None else f"{'>' if self.open_low else '>='} {self.low:g}"
        high = None if self.high is None else f"<= {self.high:g}"
        return " and ".join(part for part in (low, high) if part)

    def contains(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.open_low and value == self.low)):
            return False
        return self.high is None or value <= self.high


@dataclasses.dataclass(frozen=True)
class Parse:
    """A custom text -> value function (raises ValueError with what it expected)."""

    fn: Callable[[str], Any]
    expected: str


@dataclasses.dataclass(frozen=True)
class OneOf:
    """Choices read from a registry when the parser is built (``fn() -> names``)."""

    fn: Callable[[], Sequence[str]]


@dataclasses.dataclass(frozen=True)
class Alias:
    """Extra option strings of the same flag (deprecated names kept because they cost nothing)."""

    names: Tuple[str, ...]

    def __init__(self, *names: str):
        object.__setattr__(self, "names", names)


EXPLICIT_FLAGS = "explicit_flags"
"""A config field declared with ``metadata={"flag": False}`` under this name receives the names of the flags
given on the command line, so a stage can say when a config or derived value replaces one of them."""

CONFIG_FLAGS = "config_flags"
"""A config field declared with ``metadata={"flag": False}`` under this name receives the names of the flags
a ``--config`` file (or a file it inherits) sets; with :data:`EXPLICIT_FLAGS`, what :func:`user_set` asks."""

REQUIRED = object()
"""Marker in ``Annotated[..., REQUIRED]``: the flag must be given on the command line."""

PositiveInt = typing.Annotated[int, Range(1)]
NonNegativeInt = typing.Annotated[int, Range(0)]
PositiveFloat = typing.Annotated[float, Range(0, open_low=True)]
NonNegativeFloat = typing.Annotated[float, Range(0)]
Fraction = typing.Annotated[float, Range(0, 1)]


# ---------------------------------------------------------------------------------------------- field specs


@dataclasses.dataclass
class FlagSpec:
    """What the parser needs to know about one field."""

    name: str
    default: Any
    help: str
    group: str
    base: type = str
    optional: bool = False
    sequence: bool = False
    choices: Optional[Tuple[str, ...]] = None
    range: Optional[Range] = None
    parse: Optional[Parse] = None
    aliases: Tuple[str, ...] = ()
    required: bool = False
    group_rank: int = 0

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def expected(self) -> str:
        if self.parse is not None:
            return self.parse.expected
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        kind = {int: "an integer", float: "a number", bool: "true or false"}.get(self.base, "a string")
        if self.range is not None:
            kind += " " + self.range.describe()
        return kind

    def convert_one(self, text: str, name: str) -> Any:
        """Read one value from its text form; ``name`` is how an error refers to it (flag or file: key)."""
        if self.optional and str(text).lower() in ("none", "null"):
            return None
        try:
            if self.parse is not None:
                return self.parse.fn(text)
            if self.base is int and re.fullmatch(r"[+-]?\d+", str(text).strip()) is None:
                raise ValueError
            value = self.base(text)
        except ConfigError as err:  # a parse function that says what is wrong
            raise ConfigError(f"{name} {err}") from None
        except (TypeError, ValueError):
            raise ConfigError(f"{name} {text}: expected {self.expected()}") from None
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{name} {text}: expected {self.expected()}")
        if self.range is not None and not self.range.contains(value):
            raise ConfigError(f"{name} {value!r}: expected {self.expected()}")
        return value

    def convert_text(self, text: str) -> Any:
        """A command-line token (for a sequence, one comma-separated token); argparse shows the message."""
        try:
            if self.sequence:
                return [self.convert_one(part, self.flag) for part in str(text).split(",") if part]
            return self.convert_one(text, self.flag)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    def convert_yaml(self, value: Any, where: str) -> Any:
        """A YAML value, checked as strictly as the same text on the command line."""
        if value is None:
            if self.optional:
                return None
            raise ConfigError(f"{where}: null: expected {self.expected()}")
        if self.base is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {value!r}: expected true or false")
            return value
        if self.sequence:
            items = value if isinstance(value, list) else str(value).split(",")
            return tuple(self.convert_one(self._scalar(item, where), where) for item in items)
        return self.convert_one(self._scalar(value, where), where)

    def _scalar(self, value: Any, where: str) -> str:
        if isinstance(value, (list, dict)):
            raise ConfigError(f"{where}: {value!r}: expected a single value ({self.expected()})")
        if isinstance(value, bool) and self.base is not str:
            raise ConfigError(f"{where}: {value!r}: expected {self.expected()}")
        return str(value)


def _unwrap(hint) -> tuple:
    """``(base type, optional, sequence, choices, metadata)`` of a (possibly Annotated/Optional) type hint."""
    metadata: list = []
    optional = sequence = False
    choices = None
    while True:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            metadata.extend(hint.__metadata__)
            hint = hint.__origin__
        elif origin is typing.Union:
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = True
            hint = args[0]
        elif origin in (tuple, list):
            sequence = True
            hint = typing.get_args(hint)[0]
        elif origin is typing.Literal:
            choices = tuple(typing.get_args(hint))
            hint = type(choices[0])
        else:
            return hint, optional, sequence, choices, metadata


@functools.lru_cache(maxsize=None)
def field_docstrings(cls: type) -> Dict[str, str]:
    """``{field: docstring}`` for the fields ``cls`` itself declares (the string literal below each field)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    docs, body = {}, tree.body[0].body
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


@functools.lru_cache(maxsize=None)
def flag_specs(cls: type) -> Tuple[FlagSpec, ...]:
    """One :class:`FlagSpec` per field of the config dataclass ``cls``, in field order; the help group of a
    field is the first docstring line of the (base) class that declares it first (an override keeps its group)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    owner, docs = {}, {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            for name in klass.__dict__.get("__annotations__", {}):
                owner.setdefault(name, klass)
            docs.update(field_docstrings(klass))
    specs = []
    for field in dataclasses.fields(cls):
        if field.metadata.get("flag", True) is False:  # set by the parser, not a flag (see EXPLICIT_FLAGS)
            continue
        base, optional, sequence, choices, metadata = _unwrap(hints[field.name])
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        group_doc = (owner[field.name].__doc__ or owner[field.name].__name__).strip().splitlines()[0]
        spec = FlagSpec(name=field.name, default=default, help=docs.get(field.name, ""), group=group_doc,
                        group_rank=cls.__mro__.index(owner[field.name]), base=base,
                        optional=optional or default is None, sequence=sequence, choices=choices)
        for item in metadata:
            if isinstance(item, Range):
                spec.range = item
            elif isinstance(item, Parse):
                spec.parse = item
            elif isinstance(item, OneOf):
                spec.choices = tuple(item.fn())
            elif isinstance(item, Alias):
                spec.aliases = item.names
            elif item is REQUIRED:
                spec.required = True
        if base is bool and default is not False:
            raise TypeError(f"{cls.__name__}.{field.name}: boolean flags must default to False")
        specs.append(spec)
    return tuple(specs)


# ---------------------------------------------------------------------------------------------- the parser


class _SequenceAction(argparse.Action):
    """``--flag 2 3 5`` or ``--flag 2,3,5``: one flat tuple."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, tuple(item for value in values for item in value))


def add_flag(group, spec: FlagSpec) -> None:
    """Add the flag of ``spec`` to an ``argparse`` parser or argument group (its help shows the default), as
    :class:`ConfigParser` does for every field; lets another tool take a stage's flags unchanged."""
    names = [spec.flag, *spec.aliases]
    shown = "required" if spec.required else f"default: {_show(spec.default)}"
    help_text = f"{spec.help} ({shown})" if spec.help else f"({shown})"
    help_text = help_text.replace("%", "%%")
    if spec.base is bool:
        group.add_argument(*names, dest=spec.name, action="store_true", help=help_text)
        return
    kwargs = dict(dest=spec.name, default=spec.default, help=help_text, required=spec.required,
                  type=spec.convert_text, metavar=spec.name.upper() if spec.choices is None else None)
    if spec.choices is not None:
        kwargs["metavar"] = "{" + ",".join(map(str, spec.choices)) + "}"
    if spec.sequence:
        kwargs.update(nargs="+", action=_SequenceAction)
    group.add_argument(*names, **kwargs)


NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$", re.IGNORECASE)
r"""A command-line token that is a negative number, exponent included (``-1e-5``, ``-2.5E3``, ``-.5``): argparse's
own pattern (``^-\d+$|^-\d*\.\d+$``) misses the exponent, so ``--actor_learning_rate -1e-5`` was taken for an
option and refused ("expected one argument")."""


class ConfigParser(ArgumentParser):
    """An ``argparse`` parser generated from a config dataclass; usage errors raise :class:`ConfigError`
    (one line, no usage dump) and ``--help`` shows every default. A negative number is a value, written with a
    space or ``=`` alike (:data:`NEGATIVE_NUMBER`)."""

    def __init__(self, config_class: type, description: Optional[str] = None):
        super().__init__(description=description)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's hook (no flag of ours looks like a number)
        self.config_class = config_class
        self.specs = {spec.name: spec for spec in flag_specs(config_class)}
        groups: Dict[str, argparse._ArgumentGroup] = {}
        for spec in sorted(self.specs.values(), key=lambda spec: spec.group_rank):
            group = groups.get(spec.group) or groups.setdefault(spec.group, self.add_argument_group(spec.group))
            add_flag(group, spec)
        self.add_argument("--config", action="append", default=[], metavar="YAML",
                          help="YAML file(s) of flag values (may 'inherit:' others); later files and explicit "
                               "flags win (default: none)")

    def error(self, message: str):
        message = explain_usage_error(message, self)
        match = re.match(r"argument ([^:]+): (--\S+ .*)", message)
        raise ConfigError(match.group(2) if match else message.replace("argument ", "", 1))

    def parse_config(self, argv: Optional[Sequence[str]] = None):
        """Parse ``argv`` (after the ``--config`` files) into an instance of the config dataclass."""
        argv = list(sys.argv[1:] if argv is None else argv)
        pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        pre.add_argument("--config", action="append", default=[])
        known, _ = pre.parse_known_args(argv)
        values: Dict[str, Any] = {}
        for path in known.config:
            values.update(load_config(path, self.specs))
        self.set_defaults(**values)
        namespace = vars(self.parse_args(argv))
        namespace.pop("config")
        if EXPLICIT_FLAGS in {field.name for field in dataclasses.fields(self.config_class)}:
            namespace[EXPLICIT_FLAGS] = self.explicit_flags(argv)
        if CONFIG_FLAGS in {field.name for field in dataclasses.fields(self.config_class)}:
            namespace[CONFIG_FLAGS] = frozenset(values)
        return self.config_class(**namespace)

    def explicit_flags(self, argv: Sequence[str]) -> frozenset:
        """The flags given on the command line itself (not by a ``--config`` file or a default): argparse fills
        a default only into a namespace that lacks the attribute, so a pre-filled marker survives exactly where
        no flag was given."""
        marker = object()
        namespace = argparse.Namespace(**{name: marker for name in self.specs})
        given = vars(self.parse_args(argv, namespace=namespace))
        return frozenset(name for name in self.specs if given[name] is not marker)


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value)) if value else "none"
    return "none" if value is None else str(value)


# ---------------------------------------------------------------------------------------------- YAML layers


def _read_yaml(path: str) -> dict:
    try:
        with open(path) as handle:
            values = yaml.safe_load(handle) or {}
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: file not found") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"--config {path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values")
    return values


def config_layers(path: str, _seen: Tuple[str, ...] = ()) -> List[Tuple[str, dict]]:
    """``[(file, raw values)]`` from the deepest ``inherit:`` ancestor down to ``path`` itself."""
    real = os.path.realpath(path)
    if real in _seen:
        raise ConfigError(f"--config {path}: 'inherit' forms a cycle")
    values = _read_yaml(path)
    parents = values.pop("inherit", None) or []
    layers: List[Tuple[str, dict]] = []
    for parent in [parents] if isinstance(parents, str) else parents:
        layers += config_layers(os.path.normpath(os.path.join(os.path.dirname(path), parent)), _seen + (real,))
    return layers + [(path, values)]


def check_layer(path: str, values: dict, specs: Dict[str, FlagSpec]) -> Dict[str, Any]:
    """The typed values of one YAML layer; unknown keys and bad values name the file and key."""
    typed = {}
    for key, raw in values.items():
        name = str(key).replace("-", "_")
        if name not in specs:
            raise ConfigError(f"--config {path}: unknown key {key!r} (not a flag of this stage"
                              f"{did_you_mean(name, specs)})")
        typed[name] = specs[name].convert_yaml(raw, f"--config {path}: {key}")
    return typed


def load_config(path: str, specs: Dict[str, FlagSpec]) -> Dict[str, Any]:
    """The merged, checked values of ``path`` and the files it inherits (later layers win)."""
    merged: Dict[str, Any] = {}
    for layer_path, values in config_layers(path):
        merged.update(check_layer(layer_path, values, specs))
    return merged


# ---------------------------------------------------------------------------------------------- helpers


def select(config: Any, target: type, **overrides):
    """An instance of dataclass ``target`` from the same-named fields of ``config`` (plus ``overrides``)."""
    names = {field.name for field in dataclasses.fields(target)}
    return target(**{name: getattr(config, name) for name in names if name not in overrides}, **overrides)


def user_set(config: Any, name: str) -> bool:
    """Whether the user set flag ``name``, on the command line or in a ``--config`` file: what a rule that
    derives a default from "was this flag given?" asks (a YAML value is the user's as much as a flag is)."""
    return name in getattr(config, EXPLICIT_FLAGS, ()) or name in getattr(config, CONFIG_FLAGS, ())


def announce_replaced(given: Any, resolved: Any, reason: str) -> None:
    """One warning line for each flag given on the command line (``given.explicit_flags``) whose value in
    ``resolved`` differs: a config or derived value never replaces an explicit flag silently. Main process only
    (``RANK`` 0 or unset)."""
    if os.environ.get("RANK", "0") != "0":
        return
    for name in sorted(getattr(given, EXPLICIT_FLAGS, ())):
        before, after = getattr(given, name), getattr(resolved, name)
        if before != after:
            logger.warning("--%s %s replaced by %s: %s", name, _show(before), _show(after), reason)


def split_global_batch(global_batch: int, world_size: int, max_micro_batch: int, flag: str = "--global_batch_size"
                       ) -> Tuple[int, int]:
    """``(micro batch, accumulation steps)`` with micro x accumulation x world size = ``global_batch`` and the
    largest micro batch <= ``max_micro_batch``; impossible only when the processes cannot share the batch."""
    if global_batch % world_size:
        raise ConfigError(f"{flag} {global_batch} cannot be split over {world_size} processes; use a multiple "
                          f"of {world_size} or launch a number of processes that divides {global_batch}")
    per_process = global_batch // world_size
    micro = max(size for size in range(1, min(max_micro_batch, per_process) + 1) if per_process % size == 0)
    return micro, per_process // micro
