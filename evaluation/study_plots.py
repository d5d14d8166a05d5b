"""Figures of the study report (:mod:`evaluation.study_report`): eval curves per arm, the seed mean with its
95% bootstrap CI (pointwise over seeds) as the band."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Sequence

import numpy as np

from evaluation.plots import COLORS, _save, plt
from evaluation.study_report import METRICS, bootstrap_mean_ci, by_arm, common_seeds, resample_indices

BAND = "band: 95% bootstrap CI of the seed mean"
GROUPS = (("λ = 1 control", ("ppo", "mappo", "ppo-lam1", "mappo-lam1")),
          ("n (Fig. 6)", ("ppo", "mappo-n3", "mappo", "mappo-n10", "mappo-ninf")),
          ("termination (Fig. 5)", ("ppo", "mappo", "mappo-randomized", "mappo-parsing", "mappo-ppl")),
          ("optimizer steps per rollout", ("ppo", "mappo", "ppo-minibatch", "mappo-minibatch")))


ARM_ORDER = ("ppo", "mappo", "ppo-lam1", "mappo-lam1", "mappo-n3", "mappo-n10", "mappo-ninf", "mappo-randomized",
             "mappo-parsing", "mappo-ppl", "ppo-minibatch", "mappo-minibatch")


def arm_color(arm: str) -> str:
    """One colour per arm in every panel."""
    index = ARM_ORDER.index(arm) if arm in ARM_ORDER else len(ARM_ORDER)
    return COLORS[index] if index < len(COLORS) else plt.get_cmap("tab20")(2 * (index - len(COLORS)) + 1)


def _curves(ax, groups: Dict[str, Dict[int, dict]], arms: Sequence[str], metric: str, seeds=None) -> bool:
    drawn = False
    for arm in arms:
        color = arm_color(arm)
        if arm not in groups:
            continue
        runs = groups[arm]
        chosen = [s for s in (seeds or sorted(runs)) if s in runs]
        chosen = common_seeds({s: runs[s] for s in chosen})
        if not chosen:
            continue
        steps = runs[chosen[0]]["steps"]
        values = np.asarray([runs[s][metric] for s in chosen], dtype=float)
        indices = resample_indices(len(chosen))
        bands = [bootstrap_mean_ci(values[:, j], indices) for j in range(values.shape[1])]
        ax.plot(steps, values.mean(axis=0), "o-", color=color, markersize=3, label=f"{arm} ({len(chosen)} seeds)")
        ax.fill_between(steps, [b[0] for b in bands], [b[1] for b in bands], color=color, alpha=0.15)
        drawn = True
    return drawn


def plot_main(summaries: Sequence[dict], path: Path) -> bool:
    """PPO vs MA-PPO per task (rows) and metric (columns); False when nothing is finished."""
    tasks = [t for t in ("short", "long") if {"ppo", "mappo"} <= set(by_arm(summaries, t))]
    if not tasks:
        return False
    fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 3.6 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        groups = by_arm(summaries, task)
        seeds = common_seeds(groups["ppo"], groups["mappo"])
        for ax, metric in zip(row, METRICS):
            _curves(ax, groups, ("ppo", "mappo"), metric, seeds)
            ax.set_title(f"{task} task: held-out {metric} score", fontsize=10)
            ax.set_xlabel("PPO step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, title=BAND, title_fontsize=7)
    fig.suptitle("PPO (n = 1) vs MA-PPO (n = 5), tiny Gemma on CPU")
    _save(fig, str(path))
    return True


def plot_ablations(summaries: Sequence[dict], path: Path, task: str = "long") -> bool:
    """``task``'s ablation groups (columns), RM and gold (rows), on the ablation seeds; False when none ran."""
    groups = by_arm(summaries, task)
    present = [(title, arms) for title, arms in GROUPS
               if any(arm in groups for arm in arms if arm not in ("ppo", "mappo"))]
    if not present:
        return False
    ablation_seeds = sorted({s for arm, runs in groups.items() if arm not in ("ppo", "mappo") for s in runs})
    fig, axes = plt.subplots(2, len(present), figsize=(4.2 * len(present), 7), squeeze=False)
    for col, (title, arms) in enumerate(present):
        for row, metric in enumerate(METRICS):
            ax = axes[row][col]
            _curves(ax, groups, arms, metric, ablation_seeds)
            ax.set_title(f"{title}: {metric}", fontsize=10)
            ax.set_xlabel("PPO step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, title=BAND, title_fontsize=6)
    fig.suptitle(f"{task.capitalize()}-task ablations (seeds {', '.join(map(str, ablation_seeds))})")
    _save(fig, str(path))
    return True
