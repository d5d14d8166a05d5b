"""A stage's ``main``: its flags checked (and ``--dry_run``'s pre-flight) before the stage, and torch, are imported."""
from __future__ import annotations

import importlib
from typing import Optional, Sequence

from dschat.cli.preflight import parse_stage_flags
from dschat.core.config import ConfigParser


def run_stage(stage: str, parser: ConfigParser, argv: Optional[Sequence[str]] = None) -> dict:
    """A stage's ``main``: parse and check the flags with ``parser`` (light: no torch; ``--dry_run`` prints the
    pre-flight report and exits), then train with ``dschat.stages.<stage>.run``, imported only now: torch,
    DeepSpeed and transformers load once the flags are good."""
    args = parse_stage_flags(parser, argv)
    return importlib.import_module(f"dschat.stages.{stage}").run(args)
