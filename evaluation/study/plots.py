"""Figures of the study report (:mod:`evaluation.study.report`): eval curves per arm, the seed mean with its
95% t interval (pointwise over seeds) as the band, and the final scores of the λ and n sweeps."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Sequence

import numpy as np

from evaluation.plots import COLORS, plt, save_figure
from evaluation.study.design import ARMS, CORE_ARMS, LAMBDA_SWEEP, METRICS, N_SWEEP
from evaluation.study.stats import mean_estimate, t_interval
from evaluation.study.summaries import arm_lambda, by_arm, common_seeds, seed_split


BAND = "band: 95% t CI of the seed mean"


GROUPS = (("λ (token PPO)", LAMBDA_SWEEP + ("mappo",)),
          ("n (Fig. 6)", N_SWEEP),
          ("termination (Fig. 5 + entropy)", ("ppo", "mappo", "mappo-randomized", "mappo-parsing", "mappo-ppl",
                                              "mappo-entropy")),
          ("optimizer steps per rollout", ("ppo", "mappo", "ppo-minibatch", "mappo-minibatch")))


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


def plot_ablations(summaries: Sequence[dict], path: Path, task: str = "long") -> bool:
    """``task``'s ablation groups (columns), RM and gold (rows), on the ablation seeds; False when none ran."""
    groups = by_arm(summaries, task)
    present = [(title, arms) for title, arms in GROUPS
               if any(arm in groups for arm in arms if arm not in ("ppo", "mappo"))]
    if not present:
        return False
    ablation_seeds = seed_split(groups)[0]  # the exploration's seeds (the confirmation has its own tables)
    fig, axes = plt.subplots(2, len(present), figsize=(4.2 * len(present), 7), squeeze=False)
    for col, (title, arms) in enumerate(present):
        for row, metric in enumerate(METRICS):
            ax = axes[row][col]
            _curves(ax, groups, arms, metric, ablation_seeds)
            ax.set_title(f"{title}: {metric}", fontsize=10)
            ax.set_xlabel("PPO step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, title=BAND, title_fontsize=6)
    fig.suptitle(f"{task.capitalize()}-task arms (seeds {', '.join(map(str, ablation_seeds))})")
    save_figure(fig, str(path))
    return True


def plot_sweeps(summaries: Sequence[dict], path: Path, task: str = "long") -> bool:
    """Final gold and RM score against token PPO's λ (left) and MA-PPO's n (right), seed mean with its 95% t
    interval; False when the sweeps have not run."""
    groups = by_arm(summaries, task)
    exploration, confirmation = seed_split(groups)
    fresh = {arm: [runs[s] for s in confirmation if s in runs] for arm, runs in groups.items()}
    groups = {arm: {s: runs[s] for s in exploration if s in runs} for arm, runs in groups.items()}
    groups = {arm: runs for arm, runs in groups.items() if runs}
    lambdas = [(arm, arm_lambda(arm)) for arm in LAMBDA_SWEEP if arm in groups]
    ns = [(arm, {"ppo": 1, "mappo": 5, "mappo-ninf": 32}.get(arm) or int(arm.split("-n")[1])) for arm in N_SWEEP
          if arm in groups]
    if len(lambdas) < 2 or len(ns) < 2:
        return False
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), squeeze=False)
    for row, metric in enumerate(METRICS):
        for col, (points, label) in enumerate(((lambdas, "token PPO's λ"), (ns, "MA-PPO's n (∞ drawn at 32)"))):
            ax = axes[row][col]
            estimates = [mean_estimate([run[metric][-1] for run in groups[arm].values()]) for arm, _ in points]
            x = [value for _, value in points]
            ax.errorbar(x, [e.mean for e in estimates], yerr=[[e.mean - e.t_low for e in estimates],
                                                              [e.t_high - e.mean for e in estimates]],
                        fmt="o-", capsize=3)
            if col == 0 and "mappo" in groups:
                reference = mean_estimate([run[metric][-1] for run in groups["mappo"].values()])
                ax.axhspan(reference.t_low, reference.t_high, color=arm_color("mappo"), alpha=0.2,
                           label="MA-PPO n = 5, λ = 0.95 (t CI)")
                for offset, arm in enumerate(a for a in ("ppo-lam1", "mappo-lam1", "ppo-lam0.99", "mappo-lam0.99")
                                             if len(fresh.get(a, [])) > 1):
                    e = mean_estimate([run[metric][-1] for run in fresh[arm]])
                    ax.errorbar([arm_lambda(arm) + 0.002 * (offset + 1)], [e.mean],
                                yerr=[[e.mean - e.t_low], [e.t_high - e.mean]], fmt="s", capsize=3,
                                color=arm_color(arm), label=f"{arm}, fresh seeds ({len(fresh[arm])})")
                ax.legend(fontsize=7)
            if col == 1:
                ax.set_xscale("log", base=2)
            ax.set_xlabel(label)
            ax.set_title(f"final {metric} score ({task} task)", fontsize=10)
            ax.grid(alpha=0.3)
    fig.suptitle("Final score vs λ (token PPO) and n (MA-PPO, λ = 0.95) on the exploration seeds\n"
                 "squares: the confirmation's fresh seeds; seed mean, 95% t CI")
    save_figure(fig, str(path))
    return True
