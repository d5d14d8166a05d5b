"""``<output_dir>/run_config.yaml``: what a run was started with, written at its start by every stage — the
resolved flags (after configs, defaults and derived batch sizes), the command line, the code's commit, the
versions of the packages that shape the numbers and the machine (:func:`dschat.core.machine.machine_record`: CPU
model and ISA level, GPU, threads; another CPU kind gives other bits); what TRL, OpenRLHF and DeepSpeed-Chat users
look for first.
Its ``finished`` time is set once the final model is saved, so evaluation tools can tell a finished run from one
still running or stopped (:func:`run_finished`)."""
from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import yaml

from dschat.core.machine import machine_record

RUN_CONFIG = "run_config.yaml"
PACKAGES = ("ma-rlhf", "torch", "deepspeed", "transformers", "tokenizers", "datasets", "peft", "accelerate", "numpy")
REPO_ROOT = Path(__file__).resolve().parents[2]


def git_commit(root: Path = REPO_ROOT) -> Optional[Dict[str, Any]]:
    """``{"commit", "dirty"}`` of the checkout the code runs from, or None outside a git checkout."""
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def package_versions(names: Sequence[str] = PACKAGES) -> Dict[str, Optional[str]]:
    """Installed version of each package (None when absent)."""
    versions: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _plain(value: Any) -> Any:
    """YAML-safe form of a flag value (tuples and sets as lists)."""
    if isinstance(value, (tuple, list, set, frozenset)):
        return sorted(map(_plain, value)) if isinstance(value, (set, frozenset)) else [_plain(v) for v in value]
    return value


def run_record(args: Any, stage: str, world_size: int, argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The content of ``run_config.yaml`` for the resolved flags ``args`` of ``stage``."""
    return {
        "stage": stage,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": [sys.executable, *(sys.argv if argv is None else argv)],
        "world_size": world_size,
        "finished": None,
        "git": git_commit(),
        "versions": package_versions(),
        "machine": machine_record(),
        "config": {key: _plain(value) for key, value in dataclasses.asdict(args).items()},
    }


def write_run_config(args: Any, stage: str, world_size: int, argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Write ``<args.output_dir>/run_config.yaml`` (main process only; the caller checks) and return its content."""
    os.makedirs(args.output_dir, exist_ok=True)
    record = run_record(args, stage, world_size, argv)
    with open(os.path.join(args.output_dir, RUN_CONFIG), "w") as handle:
        yaml.safe_dump(record, handle, sort_keys=False, allow_unicode=True)
    return record


def mark_finished(output_dir: str) -> None:
    """Set ``finished`` (now) in ``<output_dir>/run_config.yaml``: the final model is saved."""
    path = os.path.join(output_dir, RUN_CONFIG)
    with open(path) as handle:
        record = yaml.safe_load(handle)
    record["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(path + ".tmp", "w") as handle:
        yaml.safe_dump(record, handle, sort_keys=False, allow_unicode=True)
    os.replace(path + ".tmp", path)


def run_finished(output_dir: str) -> bool:
    """Whether the training run in ``output_dir`` finished: ``finished`` set in its ``run_config.yaml``; for a
    directory without one (written before the record existed), its final model is there (``config.json``, or
    step 3's ``actor/config.json``)."""
    path = os.path.join(output_dir, RUN_CONFIG)
    if os.path.exists(path):
        with open(path) as handle:
            return bool((yaml.safe_load(handle) or {}).get("finished"))
    return any(os.path.exists(os.path.join(output_dir, *parts, "config.json")) for parts in ((), ("actor",)))
