"""Step 3: PPO / MA-PPO (paper §3.2, Algorithm 1). The termination rule is one flag:

    python -m dschat.cli.ppo --actor_model_name_or_path outputs/sft --critic_model_name_or_path outputs/rm \\
        --output_dir outputs/ppo --termination fixed --ngram 5          (= training/step3_rlhf_finetuning/main.py)

``--ngram 1`` is vanilla token-level PPO; ``--ngram inf`` one macro per response (n → ∞).

The critic-free baselines of Appendix C.3 share everything else (sampling, reward, KL, logging, checkpoints):
``--algo rloo`` (K = 4 samples per prompt by default), ``--algo grpo``, ``--algo reinforce``; they treat the
whole response as one macro action (§3.2.3) and build no critic.
"""
from __future__ import annotations

from dschat.cli.entry import run_stage
from dschat.stages.configs import RLHFConfig
from dschat.core.entrypoint import run_cli
from dschat.core.config import ConfigParser


def build_parser() -> ConfigParser:
    return ConfigParser(RLHFConfig, description=__doc__)


def main(argv=None) -> dict:
    """Check the flags, then train (:func:`dschat.stages.ppo.run`; :func:`dschat.cli.entry.run_stage`)."""
    return run_stage("ppo", build_parser(), argv)


if __name__ == "__main__":
    run_cli(main)
