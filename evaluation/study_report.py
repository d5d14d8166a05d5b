"""The study's report: statistics over seeds of the runs :mod:`evaluation.study` trained.

    python -m evaluation.study report --out outputs/study --report_dir docs/study

Writes ``REPORT_DIR/runs.jsonl`` (one compact line per finished run: identity, commit, cost and its eval
curves, RM, gold and length; every number of the report is recomputed from it by
``python -m evaluation.study_report REPORT_DIR/runs.jsonl``), ``study_meta.json`` (the runner's command, commit
and package versions), ``README.md`` (the tables) and the figures.

Per arm and metric (the RM score and the gold score of 128 held-out prompts, sampled with the same noise at
every evaluation): the final score and the area under the eval curve (trapezoid over the step range: the mean
level over training), each as the seed mean with two 95% intervals for the mean — Student's t over seeds and the
percentile bootstrap (which under-covers with 8 seeds: it ignores the uncertainty of the spread) — and a 95%
prediction interval for one new seed (t with s·√(1 + 1/n)). Against the baseline arm, the paired difference
(method − baseline on the same seed) with the same three intervals and the number of seeds it is ahead.
Convergence: the change of each seed's curve over the last quarter of its steps (least-squares slope × the
quarter's length), t-interval over seeds. Parity (paper §4.2, Fig. 2), made robust: on the seed-averaged curves,
EMA-smoothed (:func:`evaluation.curves.ema`), the target is the baseline's final smoothed level; the speed-up is
the first step the baseline's smoothed curve reaches it over the first step the method's does (interpolated
between evaluations); its interval comes from resampling seeds (paired) and recomputing it. A resample in which
the method never reaches the target counts as speed-up 0 (and is counted); one where a step is 0 is dropped.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import stats as scipy_stats

from evaluation.curves import Series, ema, first_crossing_step, latest_run
from evaluation.study import (ABLATION_ARMS, ARMS, CORE_ARMS, LAMBDA_SWEEP, MINI_BATCH_ARMS, N_SWEEP,
                              SWEEP_ARMS)
from evaluation.training_summary import read_metrics
from dschat.utils.cli import ArgumentParser

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


def t_interval(values: Sequence[float], level: float = LEVEL, new_seed: bool = False) -> Tuple[float, float]:
    """Student's t interval over seeds: for the mean (mean ± t·s/√n), or with ``new_seed`` the prediction
    interval of one further seed's value (mean ± t·s·√(1 + 1/n)); NaNs with fewer than two values."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    half = scipy_stats.t.ppf((1 + level) / 2, n - 1) * values.std(ddof=1) * math.sqrt((1 if new_seed else 0) + 1 / n)
    return float(values.mean() - half), float(values.mean() + half)


@dataclass(frozen=True)
class Estimate:
    """A seed mean with its 95% percentile-bootstrap interval (``low``, ``high``), t interval and the
    prediction interval of a new seed."""

    mean: float
    low: float
    high: float
    n: int
    t_low: float = math.nan
    t_high: float = math.nan
    new_low: float = math.nan
    new_high: float = math.nan

    def text(self, digits: int = 3) -> str:
        """``mean [t interval]`` (the bootstrap interval where fewer than two seeds leave no t interval)."""
        low, high = (self.low, self.high) if math.isnan(self.t_low) else (self.t_low, self.t_high)
        return f"{self.mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    def cells(self, digits: int = 3) -> str:
        """Table cells: mean, t interval, bootstrap interval, prediction interval of a new seed."""
        def pair(low, high):
            return f"[{low:.{digits}f}, {high:.{digits}f}]"

        return (f"{self.mean:.{digits}f} | {pair(self.t_low, self.t_high)} | {pair(self.low, self.high)} | "
                f"{pair(self.new_low, self.new_high)}")


def mean_estimate(values: Sequence[float], indices: Optional[np.ndarray] = None) -> Estimate:
    return Estimate(statistics.fmean(values), *bootstrap_mean_ci(values, indices), len(values),
                    *t_interval(values), *t_interval(values, new_seed=True))


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
    """One finished run's compact record: identity, commit, wall and CPU time and its eval curves."""
    marker = json.loads((Path(run_dir) / "study_run.json").read_text())
    records = latest_run(read_metrics(str(run_dir)))
    evals = [r for r in records if METRICS["rm"] in r]
    summary = {key: marker.get(key) for key in ("task", "arm", "seed", "wall_s", "cpu_s", "commit", "finished")}
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


def last_quarter_change(steps: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of the curve over its last quarter of steps (at least its last two evaluations), times
    that quarter's length: how much the curve still moved at the end of training."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    start = steps[-1] - (steps[-1] - steps[0]) / 4
    keep = steps >= start
    if keep.sum() < 2:
        keep[-2:] = True
    slope = np.polyfit(steps[keep], values[keep], 1)[0]
    return float(slope * (steps[-1] - start))


def arm_row(runs: Dict[int, dict], base: Dict[int, dict], seeds: Sequence[int], metric: str) -> dict:
    """Final score, AUC, the change over the last quarter, and against the baseline (same seeds) the paired
    differences and parity."""
    steps = runs[seeds[0]]["steps"]
    method = [runs[s][metric] for s in seeds]
    finals = [c[-1] for c in method]
    aucs = [area_under_curve(steps, c) for c in method]
    indices = resample_indices(len(seeds))
    row = {"n": len(seeds), "final": mean_estimate(finals, indices), "auc": mean_estimate(aucs, indices),
           "late": mean_estimate([last_quarter_change(steps, c) for c in method], indices)}
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


def format_paired(paired: Paired) -> str:
    return f"{paired.diff.cells()} | {paired.ahead}/{paired.diff.n}"


def table(summaries: Sequence[dict], task: str, baseline: str, arms: Sequence[str], title: str) -> List[str]:
    """Markdown rows: per arm and metric, the final score (mean, t CI, bootstrap CI, new-seed prediction
    interval), the paired difference to ``baseline`` (same four, seeds ahead), the AUC difference and parity,
    and the change over the last quarter."""
    groups = by_arm(summaries, task)
    if baseline not in groups:
        return []
    lines = [f"#### {title}", "",
             "| arm | seeds | metric | final | t CI | bootstrap CI | new seed | final − "
             f"{baseline} | t CI | bootstrap CI | new seed | ahead | AUC − {baseline} [t CI] | parity speed-up "
             "| last-quarter change [t CI] |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        if arm not in groups:
            continue
        seeds = common_seeds(groups[baseline], groups[arm])
        if not seeds:
            lines.append(f"| {arm} | 0 | — | no seed shared with {baseline} |" + " |" * 11)
            continue
        for metric in METRICS:
            row = arm_row(groups[arm], groups[baseline] if arm != baseline else groups[arm], seeds, metric)
            if "final_diff" in row:
                diff, auc, par = (format_paired(row["final_diff"]), row["auc_diff"].diff.text(),
                                  format_parity(row["parity"]))
            else:
                diff, auc, par = "— | | | | ", "—", "—"
            lines.append(f"| {arm} | {row['n']} | {metric} | {row['final'].cells()} | {diff} | {auc} | {par} | "
                         f"{row['late'].text()} |")
    return lines + [""]


def length_lines(summaries: Sequence[dict], task: str) -> List[str]:
    """Eval response length per arm: at step 0 (the SFT policy), lowest seed-mean point of the curve, final."""
    groups = by_arm(summaries, task)
    lines = ["#### Response length (eval, tokens)", "",
             "| arm | seeds | step 0 | lowest point of the seed-mean curve (step) | final [t CI] |",
             "|---|---|---|---|---|"]
    for arm in (a for a in ARMS if a in groups):
        runs = groups[arm]
        seeds = common_seeds(runs)
        curves = np.asarray([runs[s]["length"] for s in seeds], dtype=float)
        mean = curves.mean(axis=0)
        low = int(mean.argmin())
        steps = runs[seeds[0]]["steps"]
        lines.append(f"| {arm} | {len(seeds)} | {mean[0]:.1f} | {mean[low]:.1f} ({steps[low]}) | "
                     f"{mean_estimate(curves[:, -1].tolist()).text(1)} |")
    return lines + [""]


def sweep_lines(summaries: Sequence[dict], task: str = "long") -> List[str]:
    """Token PPO's λ sweep beside MA-PPO's n sweep (and the entropy rule): final gold and RM, each arm against
    MA-PPO n = 5 (paired, t CI), and the best of each family against the other's best."""
    groups = by_arm(summaries, task)
    arms = [a for a in dict.fromkeys(LAMBDA_SWEEP + N_SWEEP + ("mappo-entropy",)) if a in groups]
    if "mappo" not in groups or len(arms) < 3:
        return []
    lines = ["#### Token PPO's λ against MA-PPO's n (λ = 0.95 unless named)", "",
             "With γ = 1 and a terminal reward, MA-PPO with n-token macros at λ weights a token d tokens before the "
             "end by λ^(d/n) (§3.2.3): n = 5 at λ = 0.95 gives the opening of a 115-token response the weight "
             f"token PPO gives it at λ = 0.95^(1/5) = {0.95 ** 0.2:.4f}. Paired with MA-PPO n = 5 on the same seeds; "
             "'matches' = the t CI of the difference contains 0.", "",
             "| arm | seeds | final gold [t CI] | final RM [t CI] | gold − mappo [t CI] | RM − mappo [t CI] | matches "
             "mappo (gold, RM) |", "|---|---|---|---|---|---|---|"]
    for arm in arms:
        seeds = common_seeds(groups[arm], groups["mappo"])
        cells, matches = [], []
        finals = {m: [groups[arm][s][m][-1] for s in seeds] for m in METRICS}
        for metric in ("gold", "rm"):
            cells.append(mean_estimate(finals[metric]).text())
        for metric in ("gold", "rm"):
            if arm == "mappo":
                cells.append("—")
                continue
            diff = paired_difference([groups["mappo"][s][metric][-1] for s in seeds], finals[metric])
            cells.append(diff.diff.text())
            matches.append("yes" if diff.diff.t_low <= 0 <= diff.diff.t_high else "no")
        lines.append(f"| {arm} | {len(seeds)} | " + " | ".join(cells) + f" | {', '.join(matches) or '—'} |")
    best = best_vs_best(groups)
    if best:
        lines += ["", best]
    return lines + [""]


def best_vs_best(groups: Dict[str, Dict[int, dict]], metric: str = "gold") -> Optional[str]:
    """The best token-PPO arm (over λ) against the best MA-PPO arm (over n and the entropy rule), by mean final
    ``metric``, paired on their common seeds; picking both bests on the same runs favours each a little."""
    ppo = [a for a in LAMBDA_SWEEP if a in groups]
    mappo = [a for a in N_SWEEP + ("mappo-entropy",) if a in groups and a != "ppo"]
    if not ppo or not mappo:
        return None

    def mean_final(arm):
        return statistics.fmean(run[metric][-1] for run in groups[arm].values())

    best_ppo, best_mappo = max(ppo, key=mean_final), max(mappo, key=mean_final)
    seeds = common_seeds(groups[best_ppo], groups[best_mappo])
    diff = paired_difference([groups[best_ppo][s][metric][-1] for s in seeds],
                             [groups[best_mappo][s][metric][-1] for s in seeds])
    return (f"Best against best (by mean final {metric}): MA-PPO's best arm {best_mappo} − token PPO's best arm "
            f"{best_ppo} = {diff.diff.text()} (t CI; bootstrap [{diff.diff.low:.3f}, {diff.diff.high:.3f}]; "
            f"{diff.ahead}/{len(seeds)} seeds ahead).")


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


def cost_lines(summaries: Sequence[dict]) -> List[str]:
    """Runs per hour per task from the runner's markers (wall and CPU seconds of each step-3 process)."""
    lines = ["## Cost: runs per hour", "",
             "Wall and CPU seconds per run come from the runner's markers (`study_run.json`; CPU = user + system "
             "time of the step-3 process). Runs per hour = 3600 / mean CPU seconds × 2 cores (the runs were "
             "trained two at a time on cores shared with other jobs, so wall times are noisy; CPU seconds are the "
             "steadier measure).", "",
             "| task | runs | mean wall s | mean CPU s | runs / hour (2 cores, by CPU s) |", "|---|---|---|---|---|"]
    for task in ("short", "long"):
        runs = [s for s in summaries if s["task"] == task]
        cpus = [s["cpu_s"] for s in runs if s.get("cpu_s")]
        if not cpus:
            continue
        wall = statistics.fmean(s["wall_s"] for s in runs)
        cpu = statistics.fmean(cpus)
        lines.append(f"| {task} | {len(runs)} | {wall:.0f} | {cpu:.0f} | {2 * 3600 / cpu:.1f} |")
    span = study_span_hours(summaries)
    if span:
        lines += ["", f"Study wall time (first run's start to last run's end, SFT and RM excluded): {span:.2f} h for "
                      f"{len(summaries)} runs ({len(summaries) / span:.1f} runs per hour)."]
    return lines + [""]


def provenance_lines(summaries: Sequence[dict], meta: Optional[dict]) -> List[str]:
    """Which code made the runs (the commits in their markers) and how the runner was started."""
    commits: Dict[str, int] = {}
    for s in summaries:
        commits[s.get("commit") or "unrecorded"] = commits.get(s.get("commit") or "unrecorded", 0) + 1
    lines = ["Runs by commit: " + ", ".join(f"`{c}` ({n} runs)" for c, n in commits.items()) + "."]
    if meta and meta.get("starts"):
        start = meta["starts"][-1]
        packages = ", ".join(f"{k} {v}" for k, v in start["packages"].items() if v)
        lines += [f"Runner: `{start['command']}` (last of {len(meta['starts'])} starts, commit `{start['commit']}`), "
                  f"Python {start['python']}, {packages}."]
    return lines + [""]


def report_lines(summaries: Sequence[dict], meta: Optional[dict] = None) -> List[str]:
    lines = ["# PPO vs MA-PPO: the study", "",
             "Generated by `bash scripts/reproduce/study.sh` (`python -m evaluation.study`); every number below is "
             "recomputed from `runs.jsonl` by `python -m evaluation.study_report docs/study/runs.jsonl`; "
             "`bash scripts/reproduce/study.sh --verify` retrains one run from scratch and requires its first "
             "evaluations to equal the committed ones.", "",
             *provenance_lines(summaries, meta),
             "Cells: seed mean, then 95% intervals: *t CI* (Student's t over seeds, for the mean), *bootstrap CI* "
             "(percentile, 10k resamples; narrower, it under-covers with few seeds), *new seed* (the t prediction "
             "interval of one further seed). *rm*: the learned reward model's score; *gold*: the task's ground-truth "
             "score (`synthetic_gold_score`) of the same responses (128 samples of the held-out prompts — none of "
             "which occurs in training — one sample each at T = 0.8 with the same sampling noise at every "
             "evaluation: `--eval_seed`). Log-probs from the raw logits, as in the released code "
             "(`--logprobs_at_unit_temperature`); constant learning rate after 5 warmup iterations. Differences are "
             "paired by seed (method − baseline), with the seeds on which the method is ahead. AUC: area under the "
             "eval curve over the step range (mean level). Parity: on the seed-averaged, EMA-smoothed (0.6) curves, "
             "(first step the baseline reaches its final smoothed level) / (first step the arm does), CI over paired "
             "seed resamples. Last-quarter change: how far each seed's curve still moved over the last quarter of "
             "training (least-squares slope × span); an interval above 0 means the arm had not converged.", ""]
    for task in ("short", "long"):
        groups = by_arm(summaries, task)
        if not groups:
            continue
        lines += [f"## {TASK_TITLES[task]}", ""]
        runs = [s for s in summaries if s["task"] == task]
        lengths = [s["length"][0] for s in runs if s["length"]]
        lines += [f"{len(runs)} runs; the SFT policy's mean eval response length (step 0) "
                  f"{statistics.fmean(lengths):.1f} tokens.", ""]
        core = [a for a in CORE_ARMS[task] + SWEEP_ARMS.get(task, ()) if a in groups]
        lines += table(summaries, task, "ppo", core,
                       "Core arms and sweeps (λ = 0.95 unless named; each arm paired with PPO on its seeds)")
        lines += sweep_lines(summaries, task)
        lines += length_lines(summaries, task)
        ablations = [a for a in ABLATION_ARMS if a in groups]
        if ablations:
            lines += table(summaries, task, "ppo", ablations, "Further ablations (fewer seeds; paired with PPO)")
        if all(arm in groups for arm in MINI_BATCH_ARMS):
            lines += table(summaries, task, MINI_BATCH_ARMS[0], MINI_BATCH_ARMS,
                           "Several optimizer steps per rollout: MA-PPO vs PPO, both with mini-batch updates")
        missing = [arm for arm in ARMS if arm not in groups]
        if missing:
            lines += [f"Arms without runs on this task: {', '.join(missing)}.", ""]
    return lines + cost_lines(summaries)


README_ARMS = {"short": ("ppo", "mappo", "mappo-entropy"),
               "long": ("ppo", "mappo", "mappo-entropy", "ppo-lam0.98", "ppo-lam0.99", "ppo-lam1", "mappo-n10",
                        "mappo-ninf")}
"""The rows of the README's study table (arms with the core seed count)."""


def readme_table(summaries: Sequence[dict]) -> List[str]:
    """The README's summary table, rendered from the same summaries as the report (a test keeps them equal)."""
    lines = ["| task | arm | seeds | final RM [t CI] | final gold [t CI] | gold − PPO [t CI] (ahead) | new seed's "
             "gold − PPO | parity (RM) | final length |", "|---|---|---|---|---|---|---|---|---|"]
    for task, arms in README_ARMS.items():
        groups = by_arm(summaries, task)
        for arm in (a for a in arms if a in groups and "ppo" in groups):
            seeds = common_seeds(groups["ppo"], groups[arm])
            rm, gold = (arm_row(groups[arm], groups["ppo"] if arm != "ppo" else groups[arm], seeds, m)
                        for m in ("rm", "gold"))
            length = mean_estimate([groups[arm][s]["length"][-1] for s in seeds]).text(1)
            if arm == "ppo":
                diff = new = parity_text = "—"
            else:
                d = gold["final_diff"]
                diff = f"{d.diff.text()} ({d.ahead}/{d.diff.n})"
                new = f"[{d.diff.new_low:.3f}, {d.diff.new_high:.3f}]"
                parity_text = format_parity(rm["parity"])
            lines.append(f"| {task} | {arm} | {len(seeds)} | {rm['final'].text(2)} | {gold['final'].text()} | {diff} "
                         f"| {new} | {parity_text} | {length} |")
    return lines


POSITION_KEYS = {"opening": "opening sentence's sentiment", "first_third": "gold, first third",
                 "last_third": "gold, last third"}


def position_lines(records: Sequence[dict]) -> List[str]:
    """Table of ``positions.jsonl`` (:mod:`evaluation.study_positions`): per arm, where the response changed."""
    arms: Dict[str, List[dict]] = {}
    for record in records:
        arms.setdefault(record["arm"], []).append(record)
    order = ["sft", *ARMS]
    lines = ["#### Where the long responses changed (`python -m evaluation.study_positions`)", "",
             "Final actors, one sample per held-out prompt (128, T = 0.8, the same noise for every policy); the "
             "opening sentence is the early decision (100+ tokens before the reward). Seed mean [t CI].",
             "", "| policy | seeds | " + " | ".join(POSITION_KEYS.values()) + " |",
             "|---|---|" + "---|" * len(POSITION_KEYS)]
    for arm in [a for a in order if a in arms]:
        rows = arms[arm]
        cells = [mean_estimate([r[key] for r in rows]).text() if len(rows) > 1 else f"{rows[0][key]:.3f}"
                 for key in POSITION_KEYS]
        lines.append(f"| {arm} | {len(rows) if arm != 'sft' else '—'} | " + " | ".join(cells) + " |")
    return lines + [""]


def write_report(out: Path, report_dir: Path) -> None:
    """Collect the finished runs under ``out`` into ``report_dir/runs.jsonl`` (and the runner's
    ``study_meta.json``), then render the report from them."""
    summaries = collect(out)
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    with open(report_dir / "runs.jsonl", "w") as handle:
        for s in summaries:
            handle.write(json.dumps(s) + "\n")
    meta = Path(out) / "study_meta.json"
    if meta.is_file():  # the runs' folder is named OUT, as in study.sh, not by where it was on this machine
        (report_dir / "study_meta.json").write_text(meta.read_text().replace(str(Path(out).resolve()), "OUT")
                                                    .replace(str(out), "OUT"))
    render(summaries, report_dir)


def render(summaries: Sequence[dict], report_dir: Path) -> None:
    from evaluation.study_plots import plot_ablations, plot_main, plot_sweeps

    meta_path = Path(report_dir) / "study_meta.json"
    lines = report_lines(summaries, json.loads(meta_path.read_text()) if meta_path.is_file() else None)
    positions = Path(report_dir) / "positions.jsonl"
    if positions.is_file():
        lines += position_lines([json.loads(line) for line in positions.read_text().splitlines() if line.strip()])
    if plot_main(summaries, report_dir / "main.png"):
        lines += ["![core arms](main.png)", ""]
    if plot_sweeps(summaries, report_dir / "sweeps.png"):
        lines += ["![token PPO's λ and MA-PPO's n](sweeps.png)", ""]
    for task in ("long", "short"):
        if plot_ablations(summaries, report_dir / f"ablations_{task}.png", task):
            lines += [f"![{task}-task ablations](ablations_{task}.png)", ""]
    lines += ["## The README's table", "", *readme_table(summaries), ""]
    (Path(report_dir) / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv=None) -> None:
    parser = ArgumentParser(description="Re-render the study report from its compact run summaries.")
    parser.add_argument("runs_jsonl", type=Path, help="docs/study/runs.jsonl (the report is written beside it)")
    args = parser.parse_args(argv)
    if not args.runs_jsonl.is_file():
        parser.exit(2, f"error: {args.runs_jsonl}: no such file\n")
    summaries = [json.loads(line) for line in args.runs_jsonl.read_text().splitlines() if line.strip()]
    render(summaries, args.runs_jsonl.parent)


if __name__ == "__main__":
    main()
