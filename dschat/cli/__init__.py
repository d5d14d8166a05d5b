"""Stage entry points: ``python -m dschat.cli.{sft,rm,dpo,ppo}`` (``training/step*/main.py`` call these).

Each stage module builds its parser from its config dataclass (``build_parser()``) and defines ``main(argv)``,
which checks the flags and then calls the stage's training in :mod:`dschat.stages`. Nothing here imports torch,
DeepSpeed or transformers: ``--help`` and flag errors answer at once."""
from __future__ import annotations

from dschat.stages.configs import STAGE_CONFIGS
from dschat.core.config import ConfigError, ConfigParser


def stage_parser(stage: str) -> ConfigParser:
    """The generated parser of ``stage`` (sft, rm, dpo or ppo): the stage's flags and config checks, without
    importing the stage (no DeepSpeed)."""
    if stage not in STAGE_CONFIGS:
        raise ConfigError(f"stage {stage!r}: expected one of {', '.join(STAGE_CONFIGS)}")
    return ConfigParser(STAGE_CONFIGS[stage])
