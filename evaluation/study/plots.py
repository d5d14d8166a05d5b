"""Figures of the study report (:mod:`evaluation.study.report`): eval curves per arm, the seed mean with its
95% t interval (pointwise over seeds) as the band."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Sequence

import numpy as np

from evaluation.plots import COLORS, plt, save_figure
from evaluation.study.design import ARMS, CORE_ARMS, METRICS
from evaluation.study.stats import t_interval
from evaluation.study.summaries import by_arm, common_seeds


BAND = "band: 95% t CI of the seed mean"


def arm_color(arm: str) -> str:
    """One colour per arm in every panel."""
    order = tuple(ARMS)
    index = order.index(arm) if arm in order else len(order)
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
        bands = [t_interval(values[:, j]) for j in range(values.shape[1])]
        ax.plot(steps, values.mean(axis=0), "o-", color=color, markersize=3, label=f"{arm} ({len(chosen)} seeds)")
        ax.fill_between(steps, [b[0] for b in bands], [b[1] for b in bands], color=color, alpha=0.15)
        drawn = True
    return drawn


def plot_main(summaries: Sequence[dict], path: Path) -> bool:
    """The core arms per task (rows) and metric (columns); False when nothing is finished."""
    tasks = [t for t in ("short", "long") if {"ppo", "mappo"} <= set(by_arm(summaries, t))]
    if not tasks:
        return False
    fig, axes = plt.subplots(len(tasks), 3, figsize=(15, 3.6 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        groups = by_arm(summaries, task)
        arms = [a for a in CORE_ARMS[task] if a in groups]
        seeds = common_seeds(*(groups[a] for a in arms))
        for ax, metric in zip(row, (*METRICS, "length")):
            _curves(ax, groups, arms, metric, seeds)
            ax.set_title(f"{task} task: held-out {metric}" + (" score" if metric in METRICS else ""), fontsize=10)
            ax.set_xlabel("PPO step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, title=BAND, title_fontsize=7)
    fig.suptitle("Core arms (λ = 0.95 unless named), tiny Gemma on CPU")
    save_figure(fig, str(path))
    return True
