"""Stage entry points: ``python -m dschat.cli.{sft,rm,dpo,ppo}`` (``training/step*/main.py`` call these).

Each stage module builds its parser from its config dataclass (``build_parser()``) and defines ``main(argv)``,
which checks the flags and then calls the stage's training in :mod:`dschat.stages`. Nothing here imports torch,
DeepSpeed or transformers: ``--help`` and flag errors answer at once."""
from __future__ import annotations

import importlib
from typing import Optional, Sequence

from dschat.cli.preflight import parse_stage_flags
from dschat.stages.configs import STAGE_CONFIGS
from dschat.utils.config import ConfigError, ConfigParser


def stage_parser(stage: str) -> ConfigParser:
    """The generated parser of ``stage`` (sft, rm, dpo or ppo): the stage's flags and config checks, without
    importing the stage (no DeepSpeed)."""
    if stage not in STAGE_CONFIGS:
        raise ConfigError(f"stage {stage!r}: expected one of {', '.join(STAGE_CONFIGS)}")
    return ConfigParser(STAGE_CONFIGS[stage])


def run_stage(stage: str, parser: ConfigParser, argv: Optional[Sequence[str]] = None) -> dict:
    """A stage's ``main``: parse and check the flags with ``parser`` (light: no torch; ``--dry_run`` prints the
    pre-flight report and exits), then train with ``dschat.stages.<stage>.run``, imported only now: torch,
    DeepSpeed and transformers load once the flags are good."""
    args = parse_stage_flags(parser, argv)
    return importlib.import_module(f"dschat.stages.{stage}").run(args)
