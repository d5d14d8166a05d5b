"""Where adapter rows come from: a local file (JSON, JSONL, optionally gzipped, or parquet) or the hub.

Every adapter reads rows in its dataset's *hub schema*; only the origin differs:

* ``data_path`` is a file: its rows are the requested split;
* ``data_path`` is a directory: the file ``{split}.jsonl`` / ``.json`` / ``.jsonl.gz`` / ``.parquet`` in it;
* no ``data_path``: ``datasets.load_dataset`` on the hub dataset (needs network access or a warm HF cache).

Rows come back as ``(row_number, record)`` pairs; rows are numbered from 1 and, in JSONL files, by line
number, so an error message points at the line to open.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import DataError, row_error

Row = Tuple[int, Dict[str, Any]]
LOCAL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".parquet")


@dataclass(frozen=True)
class HubSource:
    """A hub dataset: its name, optional config or data files, and our split names mapped to its splits.

    ``splits`` maps the split names callers use ("train", "validation", ...) to the hub's split names.
    ``data_files`` (hub split -> file pattern) loads plain files from the hub repository with the ``json``
    builder, for repositories whose loading script current ``datasets`` no longer runs.
    """

    name: str
    splits: Mapping[str, str]
    config: Optional[str] = None
    data_files: Mapping[str, str] = field(default_factory=dict)

    def hub_split(self, split: str) -> str:
        if split not in self.splits:
            raise DataError(f"{self.name}: unknown split {split!r}; known splits: {', '.join(self.splits)}")
        return self.splits[split]


def read_rows(source: HubSource, split: str, data_path: Optional[str]) -> Tuple[str, List[Row]]:
    """The rows of ``split`` and a label naming where they came from (for messages)."""
    hub_split = source.hub_split(split)
    if data_path is not None:
        path = resolve_local_file(data_path, split)
        return str(path), read_local_file(path)
    return f"{source.name}[{hub_split}]", read_hub_rows(source, hub_split)


def resolve_local_file(data_path: str, split: str) -> Path:
    """``data_path`` itself when it is a file, else ``{data_path}/{split}.<suffix>``."""
    path = Path(data_path)
    if path.is_file():
        return path
    if path.is_dir():
        for suffix in LOCAL_SUFFIXES:
            candidate = path / f"{split}{suffix}"
            if candidate.is_file():
                return candidate
        raise DataError(f"{path}: no file for split {split!r} (looked for {split}{{{','.join(LOCAL_SUFFIXES)}}})")
    raise DataError(f"{path}: no such file or directory")


def read_local_file(path: Path) -> List[Row]:
    """Rows of a JSONL / JSON (array of objects, or JSON lines) / parquet file, each checked to be an object."""
    name = path.name
    if name.endswith(".parquet"):
        rows = _read_parquet(path)
    elif name.endswith((".jsonl", ".jsonl.gz")):
        rows = _read_json_lines(path)
    elif name.endswith((".json", ".json.gz")):
        rows = _read_json(path)
    else:
        raise DataError(f"{path}: unsupported file type (expected one of {', '.join(LOCAL_SUFFIXES)})")
    for number, record in rows:
        if not isinstance(record, dict):
            raise row_error(str(path), number, f"expected a JSON object, got {type(record).__name__}")
    return rows


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else open(path, encoding="utf-8")


def _read_json_lines(path: Path) -> List[Row]:
    rows = []
    with _open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise row_error(str(path), number, f"invalid JSON ({error.msg} at column {error.colno})") from None
    return rows


def _read_json(path: Path) -> List[Row]:
    """A JSON array of objects; a file of JSON lines named ``.json`` (as ``Dataset.to_json`` writes) also works."""
    with _open_text(path) as handle:
        text = handle.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            return _read_json_lines(path)
        raise DataError(f"{path}: invalid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array of row objects, got {type(data).__name__}")
    return list(enumerate(data, start=1))


def _read_parquet(path: Path) -> List[Row]:
    import pyarrow.parquet as parquet

    try:
        table = parquet.read_table(path)
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: unreadable parquet file ({type(error).__name__}: {error})") from None
    return list(enumerate(table.to_pylist(), start=1))


def read_hub_rows(source: HubSource, hub_split: str) -> List[Row]:
    """Rows of one hub split through ``datasets.load_dataset``; a failure becomes a one-line DataError."""
    import datasets

    try:
        if source.data_files:
            dataset = datasets.load_dataset("json", data_files={hub_split: source.data_files[hub_split]},
                                            split=hub_split)
        else:
            dataset = datasets.load_dataset(source.name, source.config, split=hub_split)
    except Exception as error:  # network, cache and hub errors have many types; all end here the same way
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise DataError(
            f"{source.name}[{hub_split}]: could not load from the hub ({type(error).__name__}: {first_line}); "
            "without network access pass data_path= pointing at a local copy in the hub schema"
        ) from None
    return list(enumerate(dataset, start=1))


def require_field(record: Dict[str, Any], key: str, expected_type, source: str, row_number: int,
                  schema: str) -> Any:
    """``record[key]``, checked to exist and have ``expected_type``; otherwise a DataError naming the row."""
    if key not in record:
        raise row_error(source, row_number, f"missing field {key!r} (expected {schema})")
    value = record[key]
    if not isinstance(value, expected_type):
        wanted = getattr(expected_type, "__name__", None) or "/".join(t.__name__ for t in expected_type)
        raise row_error(source, row_number, f"field {key!r} should be {wanted}, got {type(value).__name__}")
    return value
