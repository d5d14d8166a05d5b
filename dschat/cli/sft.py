"""Step 1: supervised fine-tuning on (prompt, chosen) — loss on response tokens only (paper §B.2).

Runs with plain ``python``, ``torchrun`` or ``deepspeed``, on CPU (gloo) or GPU (nccl):

    python -m dschat.cli.sft --output_dir outputs/sft      (= training/step1_supervised_finetuning/main.py)
"""
from __future__ import annotations

from dschat.cli.entry import run_stage
from dschat.stages.configs import SFTConfig
from dschat.core.entrypoint import run_cli
from dschat.core.config import ConfigParser


def build_parser() -> ConfigParser:
    return ConfigParser(SFTConfig, description=__doc__)


def main(argv=None) -> dict:
    """Check the flags, then train (:func:`dschat.stages.sft.run`; :func:`dschat.cli.entry.run_stage`)."""
    return run_stage("sft", build_parser(), argv)


if __name__ == "__main__":
    run_cli(main)
