"""Where adapter rows come from, and the readers of local data files (JSON, JSONL, optionally gzipped, parquet).

Every adapter reads rows in its dataset's *hub schema*; only the origin differs (:func:`read_rows`):

* no ``data_path``: the split's file from the hub at the pinned commit (:mod:`dschat.data.hub`);
* ``data_path`` a directory: a local mirror of the repository (the split's file at its repository path), or
  a flat directory with ``{split}.jsonl`` / ``.json`` / ``.jsonl.gz`` / ``.parquet`` named by the hub's split
  name (HH-RLHF: ``train`` and ``test``) or by ours (``validation``);
* ``data_path`` a file: all rows of the dataset, to split into train and evaluation rows.

Evaluation rows come from ``eval_data_path`` (a file or a directory as above) when it is given, else from
the source's own evaluation split, else -- for a single ``data_path`` file, or a source without an evaluation
split (WebGPT) -- from the held-out part of the training rows (:mod:`dschat.data.holdout`); the log
says which. Rows come back as ``(row_number, record)``; rows are numbered from 1 and, in JSONL files, by line
number, so an error message points at the line to open. A file without rows is an error naming it.
"""
from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .errors import DataError, row_error
from .holdout import DEFAULT_HOLDOUT, HOLDOUT_SEED, holdout_indices
from .hub import DatasetSource, download_file, mirror_file

logger = logging.getLogger(__name__)

Row = Tuple[int, Dict[str, Any]]
LOCAL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".parquet")
TRAIN = "train"


def read_rows(source: DatasetSource, split: str, data_path: Optional[str] = None,
              eval_data_path: Optional[str] = None, holdout: str = DEFAULT_HOLDOUT) -> Tuple[str, List[Row]]:
    """The rows of ``split`` and a label naming where they came from (for messages)."""
    hub_split = source.hub_split(split)
    evaluation = split != TRAIN
    if evaluation and eval_data_path is not None:
        return read_split(source, hub_split, split, eval_data_path)
    single_file = data_path is not None and Path(data_path).is_file()
    held_out = eval_data_path is None and (single_file or source.eval_held_out)
    if not held_out:
        return read_split(source, hub_split, split, data_path)
    label, rows = read_split(source, source.hub_split(TRAIN), TRAIN, data_path)
    why = "a single --data_path file" if single_file else f"{source.name} has no evaluation split"
    chosen = [rows[position] for position in holdout_indices(len(rows), evaluation, holdout, HOLDOUT_SEED)]
    logger.info("%s: %s and no --eval_data_path, so the last part of a seeded shuffle (--eval_holdout %s, "
                "seed %d) is held out for evaluation: %d of %d rows are the %s rows", label, why, holdout,
                HOLDOUT_SEED, len(chosen), len(rows), "evaluation" if evaluation else "training")
    return label, chosen


def read_split(source: DatasetSource, hub_split: str, split: str, data_path: Optional[str]) -> Tuple[str, List[Row]]:
    """One split's rows from a file, a directory (mirror or flat) or the hub."""
    if data_path is None:
        if source.repo is None:
            raise DataError(f"dataset {source.name!r} needs data_path (a file, or a directory with {{split}}.jsonl)")
        return source.label(hub_split), read_local_file(download_file(source, hub_split), source.label(hub_split))
    path = Path(data_path)
    if path.is_dir():
        path = mirror_file(source, hub_split, path) or resolve_local_file(path, *dict.fromkeys((hub_split, split)))
    elif not path.is_file():
        raise DataError(f"{path}: no such file or directory")
    return str(path), read_local_file(path)


def resolve_local_file(data_path, *split_names: str) -> Path:
    """``data_path`` itself when it is a file, else ``{data_path}/{name}.<suffix>`` for the first name found."""
    path = Path(data_path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise DataError(f"{path}: no such file or directory")
    for name in split_names:
        for suffix in LOCAL_SUFFIXES:
            candidate = path / f"{name}{suffix}"
            if candidate.is_file():
                return candidate
    looked_for = " or ".join(f"{name}{{{','.join(LOCAL_SUFFIXES)}}}" for name in split_names)
    raise DataError(f"{path}: no file for split {split_names[-1]!r} (looked for {looked_for})")


def read_local_file(path: Path, label: Optional[str] = None) -> List[Row]:
    """Rows of a JSONL / JSON (array of objects, or JSON lines) / parquet file, each checked to be an object.

    ``label`` names the file in messages (default: its path). An empty file is a DataError naming it.
    """
    label = label or str(path)
    name = path.name
    if name.endswith(".parquet"):
        rows = _read_parquet(path, label)
    elif name.endswith((".jsonl", ".jsonl.gz")):
        rows = _read_json_lines(path, label)
    elif name.endswith((".json", ".json.gz")):
        rows = _read_json(path, label)
    else:
        raise DataError(f"{label}: unsupported file type (expected one of {', '.join(LOCAL_SUFFIXES)})")
    if not rows:
        raise DataError(f"{label}: the file has no rows (expected one JSON object per row)")
    for number, record in rows:
        if not isinstance(record, dict):
            raise row_error(label, number, f"expected a JSON object, got {type(record).__name__}")
    return rows


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _decode_line(line: bytes, label: str, number: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise row_error(label, number, f"invalid UTF-8 (byte 0x{line[error.start]:02x} at column "
                                       f"{error.start + 1}); the file must be UTF-8 text") from None


def _read_json_lines(path: Path, label: str) -> List[Row]:
    rows = []
    with _open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            line = _decode_line(raw, label, number)
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise row_error(label, number, f"invalid JSON ({error.msg} at column {error.colno})") from None
    return rows


def _read_json(path: Path, label: str) -> List[Row]:
    """A JSON array of objects; a file of JSON lines named ``.json`` (as ``Dataset.to_json`` writes) also works."""
    with _open_binary(path) as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_number = data.count(b"\n", 0, error.start) + 1
        line_start = data.rfind(b"\n", 0, error.start) + 1
        raise row_error(label, line_number, f"invalid UTF-8 (byte 0x{data[error.start]:02x} at column "
                                            f"{error.start - line_start + 1}); the file must be UTF-8 text") from None
    if not text.strip():
        return []
    try:
        records = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            return _read_json_lines(path, label)
        raise DataError(f"{label}: invalid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(records, list):
        raise DataError(f"{label}: expected a JSON array of row objects, got {type(records).__name__}")
    return list(enumerate(records, start=1))


def _read_parquet(path: Path, label: str) -> List[Row]:
    import pyarrow.parquet as parquet

    try:
        table = parquet.read_table(path)
    except Exception as error:  # pyarrow raises several types for a damaged file
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise DataError(f"{label}: unreadable parquet file ({type(error).__name__}: {first_line})") from None
    return list(enumerate(table.to_pylist(), start=1))


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
