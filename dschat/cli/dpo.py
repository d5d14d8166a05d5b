"""Step 2 (baseline): Direct Preference Optimization (Rafailov et al., 2023), the offline baseline of the
paper's Appendix C.3 / Table 7. Policy and frozen reference both start from the SFT model; the policy is trained
on the preference pairs of the RM phase with the sigmoid loss −log σ(β·[(log π − log π_ref)(y+) −
(log π − log π_ref)(y−)]), log-probs summed over response tokens. Paper: learning rate 2e-7, β = 0.1 (TL;DR),
0.01 (HH-RLHF).

    python -m dschat.cli.dpo --model_name_or_path outputs/sft --output_dir outputs/dpo
    (= training/step2_dpo_finetuning/main.py)
"""
from __future__ import annotations

from dschat.cli.entry import run_stage
from dschat.stages.configs import DPOConfig
from dschat.core.entrypoint import run_cli
from dschat.core.config import ConfigParser


def build_parser() -> ConfigParser:
    return ConfigParser(DPOConfig, description=__doc__)


def main(argv=None) -> dict:
    """Check the flags, then train (:func:`dschat.stages.dpo.run`; :func:`dschat.cli.entry.run_stage`)."""
    return run_stage("dpo", build_parser(), argv)


if __name__ == "__main__":
    run_cli(main)
