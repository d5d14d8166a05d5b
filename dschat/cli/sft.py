"""Step 1: supervised fine-tuning on (prompt, chosen) — loss on response tokens only (paper §B.2).

Runs with plain ``python``, ``torchrun`` or ``deepspeed``, on CPU (gloo) or GPU (nccl):

    python -m dschat.cli.sft --output_dir outputs/sft      (= training/step1_supervised_finetuning/main.py)
"""
from __future__ import annotations

from dschat.stages.configs import SFTConfig
from dschat.cli.preflight import parse_stage_flags
from dschat.utils.cli import run_cli
from dschat.utils.config import ConfigParser


def build_parser() -> ConfigParser:
    return ConfigParser(SFTConfig, description=__doc__)


def main(argv=None) -> dict:
    """Parse and check the flags (light: no torch), then train (:func:`dschat.stages.sft.run`)."""
    args = parse_stage_flags(build_parser(), argv)  # --dry_run: the pre-flight report, then exit
    from dschat.stages.sft import run  # torch, DeepSpeed and transformers load once the flags are good

    return run(args)


if __name__ == "__main__":
    run_cli(main)
