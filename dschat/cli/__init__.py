"""Stage entry points: ``python -m dschat.cli.{sft,rm,dpo,ppo}`` (``training/step*/main.py`` call these).

Each stage module defines its config dataclass, ``build_parser()`` generated from it, and ``main(argv)``."""
from __future__ import annotations

from dschat.cli.configs import STAGE_CONFIGS
from dschat.utils.config import ConfigError, ConfigParser


def stage_parser(stage: str) -> ConfigParser:
    """The generated parser of ``stage`` (sft, rm, dpo or ppo): the stage's flags and config checks, without
    importing the stage (no DeepSpeed)."""
    if stage not in STAGE_CONFIGS:
        raise ConfigError(f"stage {stage!r}: expected one of {', '.join(STAGE_CONFIGS)}")
    return ConfigParser(STAGE_CONFIGS[stage])
