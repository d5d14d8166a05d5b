"""The study's report (issue 16): statistics over seeds of the runs :mod:`evaluation.study` trained.

    python -m evaluation.study report --out outputs/study --report_dir docs/study

Writes ``REPORT_DIR/runs.jsonl`` (one compact line per finished run: its eval curves, RM and gold; every
number of the report is recomputed from it by ``python -m evaluation.study_report REPORT_DIR/runs.jsonl``),
``README.md`` (the tables) and ``main.png`` / ``ablations_TASK.png``.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from evaluation.curves import Series, ema, first_crossing_step, latest_run
from evaluation.study import ABLATION_ARMS, MINI_BATCH_ARMS
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
    summary = {key: marker.get(key) for key in ("task", "arm", "seed", "wall_s", "cpu_s", "finished")}
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


def study_span_hours(summaries: Sequence[dict]) -> Optional[float]:
    """Wall time from the first run's start to the last run's end (from the markers' finish times)."""
    import datetime

    times = [(datetime.datetime.strptime(s["finished"], "%Y-%m-%d %H:%M:%S").timestamp(), s["wall_s"])
             for s in summaries if s.get("finished")]
    if not times:
        return None
    return (max(end for end, _ in times) - min(end - wall for end, wall in times)) / 3600


def speed_lines(summaries: Sequence[dict], jobs: int = 2) -> List[str]:
    """Runs per hour of the study's runs (two at a time), and the speed arm: MA-PPO seed 1 on the path before
    issue 14's speed work (``--recompute_rollout_forwards``) against the default path, same task and seed."""
    lines = ["## Cost: runs per hour", "",
             "Wall and CPU seconds per run come from the runner's own markers (`study_run.json`; CPU = user + "
             f"system time of the step-3 process). Runs per hour = {jobs} × 3600 / mean wall seconds ({jobs} runs "
             "at a time on 2 cores that were shared with other jobs, so wall times are noisy; CPU seconds are "
             "the steadier measure).", "",
             "| task | runs | mean wall s | mean CPU s | runs / hour |", "|---|---|---|---|---|"]
    for task in ("short", "long"):
        runs = [s for s in summaries if s["task"] == task and s["arm"] in ("ppo", "mappo")]
        if not runs:
            continue
        wall = statistics.fmean(s["wall_s"] for s in runs)
        cpus = [s["cpu_s"] for s in runs if s.get("cpu_s")]
        cpu = f"{statistics.fmean(cpus):.0f}" if cpus else "—"
        lines.append(f"| {task} | {len(runs)} | {wall:.0f} | {cpu} | {jobs * 3600 / wall:.1f} |")
    lines += ["", "Issue 14's speed work (trimmed rollouts, the training forward reused on-policy) priced on the "
              "study's own configuration: MA-PPO seed 1 on the old path (`--recompute_rollout_forwards`: the "
              "rollout-time actor and critic forwards run again) and on the default path, trained side by side so "
              "both saw the same load. Rollout trimming is on in both (it has no switch). Nothing beyond issue 14 "
              "was cut for the study; the runs were sized instead (see the task configurations in "
              "`evaluation/study.py`).", "",
              "| task | path | wall s | CPU s | runs / hour (by CPU s, 2 cores) | max abs eval difference to the "
              "study's MA-PPO seed 1 (RM, gold) |", "|---|---|---|---|---|---|"]
    for task in ("short", "long"):
        reference = next((s for s in summaries if (s["task"], s["arm"], s["seed"]) == (task, "mappo", 1)), None)
        for arm, name in (("mappo-recompute", "recomputed forwards (before)"), ("mappo-rerun", "default (after)")):
            run = next((s for s in summaries if (s["task"], s["arm"], s["seed"]) == (task, arm, 1)), None)
            if run is None or reference is None:
                continue
            gaps = [max((abs(a - b) for a, b in zip(run[m], reference[m])), default=math.nan) for m in METRICS]
            cost = run.get("cpu_s") or run["wall_s"]
            lines.append(f"| {task} | {name} | {run['wall_s']:.0f} | {run.get('cpu_s') or '—'} | "
                         f"{jobs * 3600 / cost:.1f} | {gaps[0]:.2g}, {gaps[1]:.2g} |")
    return lines + [""]


def report_lines(summaries: Sequence[dict]) -> List[str]:
    lines = ["# PPO vs MA-PPO: the study", "",
             "Generated by `bash scripts/reproduce/study.sh` (`python -m evaluation.study`); every number below is "
             "recomputed from `runs.jsonl` by `python -m evaluation.study_report docs/study/runs.jsonl`.", "",
             "Cells: seed mean [95% percentile bootstrap CI over seeds, 10k resamples]. *rm*: the learned reward "
             "model's score; *gold*: the task's ground-truth score (`synthetic_gold_score`) of the same responses "
             "(128 held-out prompts, one sample each at T = 0.8, the same sampling noise at every evaluation: "
             "`--eval_seed`); log-probs from the raw logits, as in the released code "
             "(`--logprobs_at_unit_temperature`). AUC: area under the eval curve over the step range (mean level). "
             "Differences are paired by seed (method − baseline), with the number of seeds on which the method is ahead. Parity: "
             "on the seed-averaged, EMA-smoothed (0.6) curves, (first step PPO reaches its final smoothed level) / "
             "(first step the arm does), CI over paired seed resamples.", ""]
    for task in ("short", "long"):
        groups = by_arm(summaries, task)
        if not groups:
            continue
        lines += [f"## {TASK_TITLES[task]}", ""]
        walls = [s["wall_s"] for s in summaries if s["task"] == task]
        lengths = [s["length"][0] for s in summaries if s["task"] == task and s["length"]]
        lines += [f"{len(walls)} runs, {statistics.fmean(walls) / 60:.1f} min wall per run (mean, two at a time); "
                  f"the SFT policy's mean eval response length (step 0) {statistics.fmean(lengths):.1f} tokens.", ""]
        lines += table(summaries, task, "ppo", ("ppo", "mappo"), "Main comparison: PPO (n = 1) vs MA-PPO (n = 5)")
        finals = {arm: [runs[s]["length"][-1] for s in runs] for arm, runs in groups.items() if arm in ("ppo", "mappo")}
        lines += ["Final eval response length (tokens, seed mean [95% CI]): " + "; ".join(
            f"{arm} {mean_estimate(values).text(1)}" for arm, values in finals.items()) + ".", ""]
        ablations = [arm for arm in ABLATION_ARMS if arm in groups]
        if ablations:
            lines += table(summaries, task, "ppo", ("ppo", "mappo", *ablations),
                           "Ablations (each arm's differences and parity are paired with PPO on that arm's seeds; the "
                           "ppo and mappo rows use all their seeds)")
        if all(arm in groups for arm in MINI_BATCH_ARMS):
            lines += table(summaries, task, MINI_BATCH_ARMS[0], MINI_BATCH_ARMS,
                           "Several optimizer steps per rollout: MA-PPO vs PPO, both with mini-batch updates")
        missing = [arm for arm in ABLATION_ARMS if arm not in groups]
        lines += [f"Ablation arms not run on this task: {', '.join(missing) if missing else 'none'}.", ""]
    span = study_span_hours(summaries)
    if span:
        lines += [f"Study wall time (first run's start to last run's end, SFT and RM excluded): {span:.2f} h for "
                  f"{len(summaries)} runs ({len(summaries) / span:.1f} runs per hour).", ""]
    return lines + speed_lines(summaries) + [
        "No accelerator was lent to this task, so the SmolLM2-135M arm (issue 16, item 5) was not run; "
        "`MODEL=smollm2-135m-instruct bash scripts/reproduce/study.sh` trains the same study from that model on a "
        "GPU.", ""]


POSITION_KEYS = {"opening": "opening sentence's sentiment", "first_third": "gold, first third",
                 "last_third": "gold, last third"}


def position_lines(records: Sequence[dict]) -> List[str]:
    """Table of ``positions.jsonl`` (:mod:`evaluation.study_positions`): per arm, where the response changed."""
    arms: Dict[str, List[dict]] = {}
    for record in records:
        arms.setdefault(record["arm"], []).append(record)
    order = ["sft", "ppo", "mappo", *ABLATION_ARMS]
    lines = ["#### Where the long responses changed (`python -m evaluation.study_positions`)", "",
             "Final actors, one sample per held-out prompt (128, T = 0.8, the same noise for every policy); the "
             "opening sentence is the early decision (100+ tokens before the reward). Seed mean [95% bootstrap CI].",
             "", "| policy | seeds | " + " | ".join(POSITION_KEYS.values()) + " |",
             "|---|---|" + "---|" * len(POSITION_KEYS)]
    for arm in [a for a in order if a in arms]:
        rows = arms[arm]
        cells = [mean_estimate([r[key] for r in rows]).text() if len(rows) > 1 else f"{rows[0][key]:.3f}"
                 for key in POSITION_KEYS]
        lines.append(f"| {arm} | {len(rows) if arm != 'sft' else '—'} | " + " | ".join(cells) + " |")
    return lines + [""]


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
    positions = Path(report_dir) / "positions.jsonl"
    if positions.is_file():
        lines += position_lines([json.loads(line) for line in positions.read_text().splitlines() if line.strip()])
    if plot_main(summaries, report_dir / "main.png"):
        lines += ["![main comparison](main.png)", ""]
    for task in ("long", "short"):
        if plot_ablations(summaries, report_dir / f"ablations_{task}.png", task):
            lines += [f"![{task}-task ablations](ablations_{task}.png)", ""]
    (Path(report_dir) / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Re-render the study report from its compact run summaries.")
    parser.add_argument("runs_jsonl", type=Path, help="docs/study/runs.jsonl (the report is written beside it)")
    args = parser.parse_args(argv)
    if not args.runs_jsonl.is_file():
        parser.exit(2, f"error: {args.runs_jsonl}: no such file\n")
    summaries = [json.loads(line) for line in args.runs_jsonl.read_text().splitlines() if line.strip()]
    render(summaries, args.runs_jsonl.parent)


if __name__ == "__main__":
    main()
