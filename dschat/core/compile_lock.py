"""Build locks of torch C++ extensions (DeepSpeed's JIT ops): say who holds one, clear one nobody holds.

``torch.utils.cpp_extension`` builds an op under ``<extensions root>/<op>/`` while holding ``<op>/lock``
(``torch.utils.file_baton.FileBaton``: the builder keeps the file open until it removes it), and any other
process that wants the op sleeps, silently, until the file is gone. A build killed midway leaves the file behind
and every later start then sleeps forever. :func:`check_compile_locks`, called before DeepSpeed may build an op,
logs one line per lock held by a live builder (which file, since when, which process) and removes a lock that no
process holds.
"""
from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path
from typing import Iterable, List, Optional

logger = logging.getLogger(__name__)


def extension_roots() -> List[Path]:
    """Where torch builds extensions: ``$TORCH_EXTENSIONS_DIR``, else the per-user cache
    (``~/.cache/torch_extensions``, one folder per Python/accelerator below it)."""
    explicit = os.environ.get("TORCH_EXTENSIONS_DIR")
    if explicit:
        return [Path(explicit)]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [cache / "torch_extensions"]


def find_locks(roots: Iterable[Path]) -> List[Path]:
    """Every ``<op>/lock`` (and ``<py_accel>/<op>/lock``) under ``roots``."""
    return sorted(lock for root in roots for pattern in ("*/lock", "*/*/lock") for lock in Path(root).glob(pattern))


def lock_holders(lock: Path) -> List[int]:
    """Process ids that have ``lock`` open (a live builder keeps it open from acquiring to releasing it); only
    this user's processes are visible, which is enough: the extension cache is per user."""
    target = os.path.realpath(lock)
    holders = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == target for fd in fd_dir.iterdir()):
                holders.append(int(fd_dir.parent.name))
        except OSError:  # a process that ended, or another user's
            continue
    return holders


def describe_since(path: Path) -> str:
    """When ``path`` was created, as a local time stamp."""
    return datetime.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")


def check_compile_locks(roots: Optional[Iterable[Path]] = None) -> List[Path]:
    """Log each held lock under ``roots`` (default: :func:`extension_roots`) in one line, remove each stale one
    (no process holds it: its build was killed) and return the removed ones."""
    removed = []
    for lock in find_locks(extension_roots() if roots is None else roots):
        try:
            before = lock.stat()
            since = describe_since(lock)
        except FileNotFoundError:  # released meanwhile
            continue
        holders = lock_holders(lock)
        if holders:
            logger.warning("extension build lock %s held since %s by process %s: this start waits until that "
                           "build finishes", lock, since, ", ".join(map(str, holders)))
            continue
        try:
            if lock.stat().st_ino == before.st_ino:  # the same file, not a lock a new builder just took
                lock.unlink()
                removed.append(lock)
                logger.warning("removed stale extension build lock %s (left since %s by a build that no longer "
                               "runs)", lock, since)
        except FileNotFoundError:
            continue
    return removed
