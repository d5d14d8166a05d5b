"""Step 2: reward model — a scalar head on the SFT model trained with the pairwise loss
``-log σ(r(x, y+) - r(x, y-))`` (InstructGPT; paper §B.2), on ``[bos] + prompt + response + [eos]`` scored at
the eos. Saved so that ``AutoModelForSequenceClassification.from_pretrained`` with the saved tokenizer's plain
call (``tok(prompt + response)`` adds bos and eos) gives the same scores.

    python -m dschat.cli.rm --model_name_or_path outputs/sft --output_dir outputs/rm
    (= training/step2_reward_model_finetuning/main.py)
"""
from __future__ import annotations

from dschat.cli.entry import run_stage
from dschat.stages.configs import RMConfig
from dschat.core.entrypoint import run_cli
from dschat.core.config import ConfigParser


def build_parser() -> ConfigParser:
    return ConfigParser(RMConfig, description=__doc__)


def main(argv=None) -> dict:
    """Check the flags, then train (:func:`dschat.stages.rm.run`; :func:`dschat.cli.entry.run_stage`)."""
    return run_stage("rm", build_parser(), argv)


if __name__ == "__main__":
    run_cli(main)
