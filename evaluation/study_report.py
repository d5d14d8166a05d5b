"""The study's report (issue 16): statistics over seeds of the runs :mod:`evaluation.study` trained.

    python -m evaluation.study report --out outputs/study --report_dir docs/study

Writes ``REPORT_DIR/runs.jsonl`` (one compact line per finished run: its eval curves, RM and gold; every
number of the report is recomputed from it by ``python -m evaluation.study_report REPORT_DIR/runs.jsonl``),
``README.md`` (the tables) and ``main.png`` / ``ablations.png``.

Per arm and metric (the RM score and the gold score of 128 held-out prompts, sampled with the same noise at
every evaluation): the final score, the area under the eval curve (trapezoid, divided by the step range: the
mean level over training), each as the seed mean with a 95% percentile bootstrap CI over seeds, and against
the baseline arm the paired difference (method - baseline on the same seed, bootstrap CI of its mean, and how
many seeds it is ahead). Parity (paper §4.2, Fig. 2), made robust: on the seed-averaged curves, EMA-smoothed
(:func:`evaluation.curves.ema`), the target is the baseline's final smoothed level; the speed-up is the first
step the baseline's smoothed curve reaches it over the first step the method's does (interpolated between
evaluations); its interval comes from resampling seeds (paired) and recomputing it. A resample in which the
method never reaches the target counts as speed-up 0 (and is counted); one where a step is 0 is dropped.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from evaluation.curves import Series, ema, first_crossing_step, latest_run
from evaluation.training_summary import read_metrics

METRICS = {"rm": "eval/score", "gold": "eval/gold"}
N_BOOT = 10000
LEVEL = 0.95
SMOOTHING = 0.6


# ---- statistics (pure) -------------------------------------------------------------------------------------

def percentile_interval(samples: Sequence[float], level: float = LEVEL) -> Tuple[float, float]:
    """The central ``level`` percentile interval of bootstrap samples (numpy's linear interpolation)."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(np.asarray(samples, dtype=float), [tail, 100 - tail])
    return float(low), float(high)


def resample_indices(n: int, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """``[n_boot, n]`` seed indices drawn with replacement (the same draws for every statistic of a table)."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def bootstrap_mean_ci(values: Sequence[float], indices: Optional[np.ndarray] = None,
                      level: float = LEVEL) -> Tuple[float, float]:
    """95% percentile bootstrap CI of the mean of ``values`` over the resamples ``indices``."""
    values = np.asarray(values, dtype=float)
    indices = resample_indices(len(values)) if indices is None else indices
    return percentile_interval(values[indices].mean(axis=1), level)


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def mean_estimate(values: Sequence[float], indices: Optional[np.ndarray] = None) -> Estimate:
    return Estimate(statistics.fmean(values), *bootstrap_mean_ci(values, indices), len(values))


@dataclass(frozen=True)
class Paired:
    """method - baseline per seed: the mean difference with its bootstrap CI, and seeds where method is ahead."""

    diff: Estimate
    ahead: int


def paired_difference(baseline: Sequence[float], method: Sequence[float],
                      indices: Optional[np.ndarray] = None) -> Paired:
    """Paired by seed: ``baseline[i]`` and ``method[i]`` are the same seed."""
    if len(baseline) != len(method):
        raise ValueError("paired difference needs one baseline value per method value")
    diffs = [m - b for b, m in zip(baseline, method)]
    return Paired(mean_estimate(diffs, indices), sum(d > 0 for d in diffs))


def area_under_curve(steps: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoid area under the eval curve divided by the step range: the curve's mean level over training."""
    if len(steps) < 2:
        return float(values[0])
    area = sum((s1 - s0) * (v0 + v1) / 2 for s0, s1, v0, v1 in zip(steps, steps[1:], values, values[1:]))
    return area / (steps[-1] - steps[0])


@dataclass(frozen=True)
class ParityResult:
    target: float
    baseline_step: Optional[float]
    method_step: Optional[float]
    speedup: Optional[float]


def smoothed_mean_curve(steps: Sequence[float], curves: Sequence[Sequence[float]],
                        smoothing: float = SMOOTHING) -> Series:
    """Mean over seeds (curves on the same ``steps``), then the bias-corrected EMA."""
    mean = np.asarray(curves, dtype=float).mean(axis=0)
    return Series(tuple(steps), ema(mean.tolist(), smoothing))


def parity(steps: Sequence[float], baseline: Sequence[Sequence[float]], method: Sequence[Sequence[float]],
           smoothing: float = SMOOTHING) -> ParityResult:
    """Parity speed-up on the seed-averaged, smoothed curves: the baseline's final smoothed level is the target;
    the speed-up is (first step the baseline reaches it) / (first step the method does)."""
    base, meth = smoothed_mean_curve(steps, baseline, smoothing), smoothed_mean_curve(steps, method, smoothing)
    target = base.values[-1]
    base_step, method_step = first_crossing_step(base, target), first_crossing_step(meth, target)
    speedup = base_step / method_step if method_step else None
    return ParityResult(target, base_step, method_step, speedup)


@dataclass(frozen=True)
class ParityInterval:
    point: ParityResult
    low: float
    high: float
    never: int
    """Resamples in which the method never reaches the target (counted as speed-up 0)."""
    dropped: int
    """Resamples with an undefined speed-up (a curve reaches the target at step 0)."""


def parity_interval(steps: Sequence[float], baseline: Sequence[Sequence[float]],
                    method: Sequence[Sequence[float]], indices: Optional[np.ndarray] = None,
                    smoothing: float = SMOOTHING) -> ParityInterval:
    """:func:`parity` and its percentile interval over paired seed resamples."""
    baseline, method = np.asarray(baseline, dtype=float), np.asarray(method, dtype=float)
    indices = resample_indices(len(baseline)) if indices is None else indices
    samples, never, dropped = [], 0, 0
    for row in indices:
        result = parity(steps, baseline[row], method[row], smoothing)
        if result.method_step is None:
            never += 1
            samples.append(0.0)
        elif result.speedup is None:
            dropped += 1
        else:
            samples.append(result.speedup)
    low, high = percentile_interval(samples) if samples else (math.nan, math.nan)
    return ParityInterval(parity(steps, baseline, method, smoothing), low, high, never, dropped)


# ---- runs -> compact summaries ---------------------------------------------------------------------------------

def run_summary(run_dir: Path) -> dict:
    """One finished run's compact record: identity, wall time and its eval curves (RM and gold)."""
    marker = json.loads((Path(run_dir) / "study_run.json").read_text())
    records = latest_run(read_metrics(str(run_dir)))
    evals = [r for r in records if METRICS["rm"] in r]
    summary = {key: marker[key] for key in ("task", "arm", "seed", "wall_s")}
    summary["steps"] = [r["step"] for r in evals]
    for name, key in METRICS.items():
        summary[name] = [round(r[key], 5) for r in evals if key in r]
    summary["length"] = [round(r.get("eval/response_length", math.nan), 2) for r in evals]
    return summary


def collect(out: Path) -> List[dict]:
    """The summaries of every finished run under ``out`` (``TASK/ARM/seedS/study_run.json``)."""
    return [run_summary(marker.parent) for marker in sorted(Path(out).glob("*/*/seed*/study_run.json"))]


# ---- tables ------------------------------------------------------------------------------------------------------

def by_arm(summaries: Sequence[dict], task: str) -> Dict[str, Dict[int, dict]]:
    arms: Dict[str, Dict[int, dict]] = {}
    for s in summaries:
        if s["task"] == task:
            arms.setdefault(s["arm"], {})[s["seed"]] = s
    return arms


def arm_row(runs: Dict[int, dict], base: Dict[int, dict], seeds: Sequence[int], metric: str) -> dict:
    """Final score, AUC, and against the baseline (same seeds) the paired differences and parity."""
    steps = runs[seeds[0]]["steps"]
    method = [runs[s][metric] for s in seeds]
    finals = [c[-1] for c in method]
    aucs = [area_under_curve(steps, c) for c in method]
    indices = resample_indices(len(seeds))
    row = {"n": len(seeds), "final": mean_estimate(finals, indices), "auc": mean_estimate(aucs, indices)}
    if base is not runs:
        baseline = [base[s][metric] for s in seeds]
        row["final_diff"] = paired_difference([c[-1] for c in baseline], finals, indices)
        row["auc_diff"] = paired_difference([area_under_curve(steps, c) for c in baseline], aucs, indices)
        row["parity"] = parity_interval(steps, baseline, method, indices)
    return row


def common_seeds(*arms: Dict[int, dict]) -> List[int]:
    seeds = sorted(set.intersection(*(set(a) for a in arms)))
    steps = {tuple(a[s]["steps"]) for a in arms for s in seeds}
    if len(steps) > 1:  # runs of different lengths are not comparable point by point
        longest = max(steps, key=len)
        seeds = [s for s in seeds if all(tuple(a[s]["steps"]) == longest for a in arms)]
    return seeds


def format_parity(p: ParityInterval) -> str:
    if p.point.method_step is None:
        point = "never"
    elif p.point.speedup is None:
        point = "n/a"
    else:
        point = f"{p.point.speedup:.2f}x"
    note = f"; never in {100 * p.never / N_BOOT:.0f}% of resamples" if p.never else ""
    return f"{point} [{p.low:.2f}, {p.high:.2f}]{note}"


def table(summaries: Sequence[dict], task: str, baseline: str, arms: Sequence[str], title: str) -> List[str]:
    """Markdown rows: per arm, RM and gold: final, AUC, paired differences vs ``baseline`` and parity."""
    groups = by_arm(summaries, task)
    if baseline not in groups:
        return [f"*{title}: no finished {baseline} runs yet.*", ""]
    lines = [f"#### {title}", "",
             "| arm | seeds | metric | final score | AUC | final − baseline (ahead) | AUC − baseline (ahead) "
             "| parity speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        if arm not in groups:
            lines.append(f"| {arm} | 0 | — | not run | | | | |")
            continue
        seeds = common_seeds(groups[baseline], groups[arm])
        if not seeds:
            lines.append(f"| {arm} | 0 | — | no seed shared with {baseline} | | | | |")
            continue
        for metric in METRICS:
            row = arm_row(groups[arm], groups[baseline] if arm != baseline else groups[arm], seeds, metric)
            diff = (f"{row['final_diff'].diff.text()} ({row['final_diff'].ahead}/{row['n']})"
                    if "final_diff" in row else "—")
            auc_diff = (f"{row['auc_diff'].diff.text()} ({row['auc_diff'].ahead}/{row['n']})"
                        if "auc_diff" in row else "—")
            par = format_parity(row["parity"]) if "parity" in row else "—"
            lines.append(f"| {arm} | {row['n']} | {metric} | {row['final'].text()} | {row['auc'].text()} | {diff} "
                         f"| {auc_diff} | {par} |")
    return lines + [""]


# ---- report ------------------------------------------------------------------------------------------------------

TASK_TITLES = {"short": "short task (synthetic, ~16 tokens)", "long": "long task (synthetic-long, ~115 tokens)"}
ABLATION_ARMS = ("ppo-lam1", "mappo-lam1", "mappo-n3", "mappo-n10", "mappo-ninf", "mappo-randomized",
                 "mappo-parsing", "mappo-ppl", "ppo-minibatch", "mappo-minibatch")


def report_lines(summaries: Sequence[dict]) -> List[str]:
    lines = ["# PPO vs MA-PPO: the study", "",
             "Generated by `bash scripts/reproduce/study.sh` (`python -m evaluation.study`); every number below is "
             "recomputed from `runs.jsonl` by `python -m evaluation.study_report docs/study/runs.jsonl`.", "",
             "Cells: seed mean [95% percentile bootstrap CI over seeds, 10k resamples]. *rm*: the learned reward "
             "model's score; *gold*: the task's ground-truth score (`synthetic_gold_score`) of the same responses "
             "(128 held-out prompts, one sample each at T = 0.8, the same sampling noise at every evaluation: "
             "`--eval_seed`). AUC: area under the eval curve over the step range (mean level). Differences are "
             "paired by seed (method − baseline), with the number of seeds on which the method is ahead. Parity: "
             "on the seed-averaged, EMA-smoothed (0.6) curves, (first step PPO reaches its final smoothed level) / "
             "(first step the arm does), CI over paired seed resamples.", ""]
    for task in ("short", "long"):
        groups = by_arm(summaries, task)
        if not groups:
            continue
        lines += [f"## {TASK_TITLES[task]}", ""]
        walls = [s["wall_s"] for s in summaries if s["task"] == task]
        lengths = [s["length"][0] for s in summaries if s["task"] == task and s["length"]]
        lines += [f"{len(walls)} runs, {statistics.fmean(walls) / 60:.1f} min per run on one core "
                  f"(mean); SFT policy's mean eval response length {statistics.fmean(lengths):.1f} tokens.", ""]
        lines += table(summaries, task, "ppo", ("ppo", "mappo"), "Main comparison: PPO (n = 1) vs MA-PPO (n = 5)")
        ablations = [arm for arm in ABLATION_ARMS if arm in groups]
        if ablations:
            lines += table(summaries, task, "ppo", ("ppo", "mappo", *ablations),
                           "Ablations (baseline: PPO on the same seeds)")
    return lines


def write_report(out: Path, report_dir: Path) -> None:
    """Collect the finished runs under ``out`` into ``report_dir/runs.jsonl`` and render the report from it."""
    summaries = collect(out)
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    with open(report_dir / "runs.jsonl", "w") as handle:
        for s in summaries:
            handle.write(json.dumps(s) + "\n")
    render(summaries, report_dir)


def render(summaries: Sequence[dict], report_dir: Path) -> None:
    from evaluation.study_plots import plot_ablations, plot_main

    lines = report_lines(summaries)
    if plot_main(summaries, report_dir / "main.png"):
        lines += ["![main comparison](main.png)", ""]
    if plot_ablations(summaries, report_dir / "ablations.png"):
        lines += ["![ablations](ablations.png)", ""]
    (Path(report_dir) / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m evaluation.study_report RUNS_JSONL   (re-renders the report beside it)",
              file=sys.stderr)
        sys.exit(2)
    path = Path(argv[0])
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        sys.exit(2)
    summaries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    render(summaries, path.parent)


if __name__ == "__main__":
    main()
