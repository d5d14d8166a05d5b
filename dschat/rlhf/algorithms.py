"""What ``--algo`` selects, without the maths (so the command line checks it without torch): whether step 3
builds a critic and the default and least samples per prompt K. The estimators of each algorithm are in
:mod:`dschat.rlhf.advantage_estimators`, keyed by the same names (paper §3.2.3, Appendix C.3)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class Algorithm:
    """One ``--algo``: whether step 3 builds a critic, the default and least samples per prompt K, and what
    ``--scale_rewards auto`` means for it (critic-free only)."""

    name: str
    needs_critic: bool
    default_samples_per_prompt: int
    min_samples_per_prompt: int
    scale_rewards: str = "none"


ALGORITHMS: Dict[str, Algorithm] = {algorithm.name: algorithm for algorithm in (
    Algorithm("ppo", needs_critic=True, default_samples_per_prompt=1, min_samples_per_prompt=1),
    Algorithm("rloo", needs_critic=False, default_samples_per_prompt=4, min_samples_per_prompt=2),
    Algorithm("grpo", needs_critic=False, default_samples_per_prompt=4, min_samples_per_prompt=2,
              scale_rewards="group"),
    Algorithm("reinforce", needs_critic=False, default_samples_per_prompt=1, min_samples_per_prompt=1),
)}
REINFORCE_BASELINES = ("none", "batch_mean")
"""``--reinforce_baseline``: the raw sequence return, or minus the batch's mean return."""
SCALE_REWARDS = ("group", "batch", "none")
"""``--scale_rewards``: divide critic-free advantages by the std of the group's or the batch's returns, or not."""


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name``; a ValueError naming ``--algo`` otherwise."""
    if name not in ALGORITHMS:
        raise ValueError(f"--algo {name!r} is unknown; expected one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]
