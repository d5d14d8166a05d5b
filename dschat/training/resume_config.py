"""What a resumed run may change: every checkpoint's manifest records the resolved configuration of the run that
saved it (:func:`config_record`), and ``--resume`` compares it with the configuration of the resuming run.

A flag defines the experiment unless it is listed in :data:`SAFE_TO_CHANGE`: the set compared is derived from
the config dataclass (every field), so a flag added later is compared without anyone remembering to list it. A
change to an experiment-defining flag (the termination rule and its parameters, σ, aggregation, ratio, γ, λ,
learning rates and schedules, batch sizes, models, data, seeds, ...) is refused in one line listing
``old -> new``; with ``--allow_config_change`` the run continues, and the differences are logged and written
to ``metrics.jsonl`` (key :data:`CHANGES_KEY` at the resumed step)."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional

from dschat.core.config import ConfigError

SAFE_TO_CHANGE = frozenset({
    "output_dir", "tensorboard_dir",  # where outputs go (a run directory may be moved or copied)
    "resume", "allow_config_change", "dry_run",  # how this invocation starts
    "log_steps", "log_samples", "no_progress_bar",  # logging
    "eval_steps", "per_device_eval_batch_size",  # evaluation cadence and throughput
    "save_steps",  # checkpoint cadence
    "local_rank",  # set by the launcher
    "code_workers",  # programs executed in parallel (the scores do not depend on it)
    "data_cache_dir",  # where the seeded phase split is cached (the split itself is compared via its flags)
})
"""Flags a resumed run may change without ``--allow_config_change``: where outputs go, logging, evaluation
cadence and batch, save cadence, parallelism that does not change a number. Everything else defines the
experiment."""

CHANGES_KEY = "resume/config_changes"
"""``metrics.jsonl`` key of the experiment-defining changes accepted with ``--allow_config_change``."""


def config_record(config: Any) -> Dict[str, Any]:
    """The resolved configuration ``config`` (a config dataclass) as JSON values (tuples become lists): its
    flags, not the fields that record how they were given (``metadata={"flag": False}``, e.g. which flags were
    explicit)."""
    values = dataclasses.asdict(config)
    return json.loads(json.dumps({f.name: values[f.name] for f in dataclasses.fields(config)
                                  if f.metadata.get("flag", True)}))


def experiment_changes(saved: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    """``["flag: old -> new"]`` for every experiment-defining flag both configurations record with different
    values (a flag only one of them has -- added or removed by an upgrade -- is not compared)."""
    names = sorted((set(saved) & set(current)) - SAFE_TO_CHANGE)
    return [f"{name}: {_show(saved[name])} -> {_show(current[name])}" for name in names
            if saved[name] != current[name]]


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


def check_resume_config(saved: Optional[Dict[str, Any]], config: Any, allow_change: bool, path: str) -> List[str]:
    """The experiment-defining changes between the checkpoint at ``path`` (its recorded configuration ``saved``)
    and the resuming run's ``config``: refused (ConfigError, one line listing ``old -> new``) unless
    ``allow_change``; returned (empty when nothing changed, or when the checkpoint records no configuration)."""
    if saved is None:
        return []
    changes = experiment_changes(saved, config_record(config))
    if changes and not allow_change:
        raise ConfigError(f"--resume: checkpoint {path} was saved with a different experiment configuration "
                          f"({'; '.join(changes)}); resume with the same flags, or pass --allow_config_change "
                          "to continue anyway (the changes are then logged)")
    return changes
