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
from evaluation.study import (ABLATION_ARMS, ARMS, CONFIRMATION_TIERS, CORE_ARMS, LAMBDA_SWEEP, MAPPO_LAMBDA_ARMS,
                              MAPPO_LAMBDAS, MINI_BATCH_ARMS, MODEL_SEED_PAIRS, N_SWEEP,
                              SWEEP_ARMS, TASKS,
                              confirmation_seeds, model_seed_tasks)
from evaluation.study_inference import (ALPHA, COLLAPSE_FRACTION, EQUIVALENCE_MARGINS, LEVEL, MARGIN_RULE,
                                        VARIATION_COVERED, AcrossModelSeeds, Equivalence, across_model_seeds,
                                        AdjustedTest, adjust_families, best_arm, collapse, collapse_floored, format_p,
                                        held_out_best_vs_best, new_model_seed_interval,
                                        paired_t_p,
                                        seeds_for_equivalence, t_interval, tost)
from evaluation.training_summary import read_metrics
from dschat.utils.cli import ArgumentParser
from dschat.utils.machine import machine_line

METRICS = {"rm": "eval/score", "gold": "eval/gold"}
N_BOOT = 10000
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
    if marker.get("machine"):
        summary["machine"] = marker["machine"]
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
    """Token PPO's λ sweep beside MA-PPO's n sweep, the entropy rule and MA-PPO's λ arms: final gold and RM, each
    arm against MA-PPO n = 5 at λ = 0.95 (paired, t CI, equivalence by TOST within the margins)."""
    groups = by_arm(summaries, task)
    arms = sweep_arms(groups, task)
    if not arms:
        return []
    tests = multiplicity(summaries)
    margins = ", ".join(f"{m} ±{v:g}" for m, v in EQUIVALENCE_MARGINS.items())
    lines = ["#### Token PPO's λ against MA-PPO's n (λ = 0.95 unless named)", "",
             "With γ = 1 and a terminal reward, MA-PPO with n-token macros at λ weights a token d tokens before the "
             "end by λ^(d/n) (§3.2.3): n = 5 at λ = 0.95 gives the opening of a 115-token response the weight "
             f"token PPO gives it at λ = 0.95^(1/5) = {0.95 ** 0.2:.4f}. Paired with MA-PPO n = 5 on the same seeds; "
             f"'equivalent' = two one-sided tests at 5% within the margins ({margins}; {MARGIN_RULE}), Holm-adjusted "
             "within the test's family (see \"Families of tests\"), not a CI that contains 0.", "",
             "| arm | seeds | final gold [t CI] | final RM [t CI] | gold − mappo [t CI] | RM − mappo [t CI] | "
             "equivalent to mappo (gold, RM) |", "|---|---|---|---|---|---|---|"]
    for arm in arms:
        seeds = common_seeds(groups[arm], groups["mappo"])
        if len(seeds) < 2:
            continue
        cells, matches = [], []
        finals = {m: [groups[arm][s][m][-1] for s in seeds] for m in METRICS}
        for metric in ("gold", "rm"):
            cells.append(mean_estimate(finals[metric]).text())
        for metric in ("gold", "rm"):
            if arm == "mappo":
                cells.append("—")
                continue
            diffs = [f - groups["mappo"][s][metric][-1] for f, s in zip(finals[metric], seeds)]
            cells.append(mean_estimate(diffs).text())
            found = adjusted_test(tests, task, arm, "mappo", metric, seeds)
            matches.append("yes" if found.equivalence.equivalent else "no")
        lines.append(f"| {arm} | {len(seeds)} | " + " | ".join(cells) + f" | {', '.join(matches) or '—'} |")
    return lines + [""]


def sweep_arms(groups: Dict[str, Dict[int, dict]], task: str) -> List[str]:
    """The arms of the table of token PPO's λ against MA-PPO's n (each paired with MA-PPO n = 5); empty when the
    task has too few of them."""
    arms = [a for a in dict.fromkeys(LAMBDA_SWEEP + N_SWEEP + ("mappo-entropy",) + MAPPO_LAMBDA_ARMS.get(task, ()))
            if a in groups]
    return arms if "mappo" in groups and len(arms) >= 3 else []


# ---- the deciding question: does the macro add anything beyond λ? ---------------------------------------------

def arm_lambda(arm: str) -> float:
    """An arm's GAE λ: 0.95 (Table 5) unless its name says otherwise (``...-lam0.99``)."""
    return float(arm.split("lam")[1]) if "-lam" in arm else 0.95


def seed_split(groups: Dict[str, Dict[int, dict]]) -> Tuple[List[int], List[int]]:
    """(exploration seeds, confirmation seeds): the baseline arm's seeds, and the fresh seeds the confirmation's
    first arm ran on beyond them (:data:`evaluation.study.CONFIRMATION_TIERS`)."""
    exploration = sorted(groups.get("ppo", {}))
    first = CONFIRMATION_TIERS["long"][0][0]
    return exploration, sorted(set(groups.get(first, {})) - set(exploration))


def mappo_family(groups: Dict[str, Dict[int, dict]], seeds: Sequence[int]) -> List[str]:
    """MA-PPO's arms (every n, the entropy rule, their λ arms) with a run on each of ``seeds``."""
    arms = dict.fromkeys((*N_SWEEP[1:], *MAPPO_LAMBDAS["mappo"], *MAPPO_LAMBDAS["mappo-entropy"]))
    return [a for a in arms if a in groups and set(seeds) <= set(groups[a])]


def token_ppo_family(groups: Dict[str, Dict[int, dict]], seeds: Sequence[int]) -> List[str]:
    return [a for a in LAMBDA_SWEEP if a in groups and set(seeds) <= set(groups[a])]


@dataclass(frozen=True)
class Verdict:
    """MA-PPO's best arm − token PPO's best arm on ``metric``, the bests chosen by final gold on other seeds than
    the compared ones (:func:`evaluation.study_inference.held_out_best_vs_best`), pooled over both halves."""

    metric: str
    seeds: Tuple[int, ...]
    folds: tuple
    diff: Estimate
    p: float
    equivalence: Equivalence

    @property
    def ahead(self) -> int:
        return sum(d > 0 for fold in self.folds for d in fold.diffs)


def verdicts(groups: Dict[str, Dict[int, dict]], ppo: Sequence[str], mappo: Sequence[str],
             seeds: Sequence[int]) -> Dict[str, Verdict]:
    """Per metric, the held-out best-against-best difference over ``seeds`` (bests chosen by gold on the other
    half); a family of one arm was chosen beforehand."""
    if not ppo or not mappo or len(seeds) < 4:
        return {}

    def finals(metric):
        return {a: {s: groups[a][s][metric][-1] for s in seeds} for a in (*ppo, *mappo)}

    result = {}
    for metric in ("gold", "rm"):
        folds = held_out_best_vs_best(finals("gold"), ppo, mappo, seeds, finals(metric))
        diffs = [d for fold in folds for d in fold.diffs]
        result[metric] = Verdict(metric, tuple(seeds), tuple(folds), mean_estimate(diffs), paired_t_p(diffs),
                                 tost(diffs, EQUIVALENCE_MARGINS[metric]))
    return result


def exploration_verdicts(groups: Dict[str, Dict[int, dict]]) -> Dict[str, Verdict]:
    """On the exploration seeds: every token-PPO λ against every MA-PPO arm they all ran."""
    exploration, _ = seed_split(groups)
    return verdicts(groups, token_ppo_family(groups, exploration), mappo_family(groups, exploration), exploration)


def confirmation_verdicts(groups: Dict[str, Dict[int, dict]]) -> Tuple[Optional[str], Dict[str, Verdict]]:
    """On the confirmation's fresh seeds (those every candidate ran): token PPO at the λ that was best on the
    exploration seeds against MA-PPO's confirmation arms (its best chosen on the other half); (token PPO's arm,
    verdicts)."""
    exploration, confirmation = seed_split(groups)
    candidates = token_ppo_family(groups, exploration)
    if not candidates or not confirmation:
        return None, {}
    finals = {a: {s: groups[a][s]["gold"][-1] for s in exploration} for a in candidates}
    best = best_arm(finals, candidates, exploration)
    first_tier = [a for a in CONFIRMATION_TIERS["long"][0] if a in groups and a not in LAMBDA_SWEEP]
    if best not in groups or not first_tier:
        return best, {}
    seeds = [s for s in common_seeds(*(groups[a] for a in (best, *first_tier))) if s in confirmation]
    return best, verdicts(groups, [best], mappo_family(groups, seeds), seeds)


def reading(mean: float, p_holm: float, equivalence: Equivalence, better: str, worse: str) -> str:
    """The verdict in words: a difference (Holm-adjusted p < α), equivalence within the margin (TOST), both, or
    neither."""
    if p_holm < ALPHA:
        winner = better if mean > 0 else worse
        return f"{winner} ahead" + (f", by less than the margin ±{equivalence.margin:g}"
                                    if equivalence.equivalent else "")
    if equivalence.equivalent:
        return f"equivalent within ±{equivalence.margin:g}"
    return f"undecided: no difference shown, and equivalence within ±{equivalence.margin:g} not shown either"


def verdict_rows(found: Dict[str, Verdict], tests: Dict[TestKey, AdjustedTest], procedure: str) -> List[str]:
    rows = []
    for metric, v in found.items():
        test = tests["verdict", procedure, metric]
        chosen = "; ".join(f"on {f.select_seeds[0]}-{f.select_seeds[-1]}: {f.best_b} vs {f.best_a}"
                           for f in v.folds)
        rows.append(f"| {metric} | {chosen} | {v.diff.text()} | {v.ahead}/{v.diff.n} | {format_p(v.p)} | "
                    f"{format_p(test.p_holm)} | {test.equivalence.text()} | "
                    f"{reading(v.diff.mean, test.p_holm, test.equivalence, 'MA-PPO', 'token PPO')} |")
    return rows


VERDICT_HEADER = ["| metric | chosen (by gold, on the other half) | MA-PPO best − token PPO best [95% t CI] | ahead | "
                  "p | Holm p | equivalence | reading |", "|---|---|---|---|---|---|---|---|"]


def verdict_lines(groups: Dict[str, Dict[int, dict]], tests: Dict[TestKey, AdjustedTest]) -> List[str]:
    exploration, confirmation = seed_split(groups)
    explored = exploration_verdicts(groups)
    best, confirmed = confirmation_verdicts(groups)
    if not explored and not confirmed:
        return []
    lines = ["#### The verdict: MA-PPO's best against token PPO's best, each chosen on other seeds", "",
             "Equivalence margin Δ: " + MARGIN_RULE + ". p: two-sided paired t test; Holm p and the TOST p: "
             "Holm-adjusted within the test's family (\"Families of tests\": each verdict's two metrics are a family "
             "of their own); equivalence: two one-sided tests at 5%.", ""]
    if confirmed:
        v = confirmed["gold"]
        commits: Dict[str, int] = {}
        for arm in (best, *mappo_family(groups, v.seeds)):
            for seed in v.seeds:
                commits[groups[arm][seed]["commit"]] = commits.get(groups[arm][seed]["commit"], 0) + 1
        made = ", ".join(f"`{c}` ({n} runs)" for c, n in commits.items())
        lines += [f"**Confirmation** (fresh seeds {v.seeds[0]}-{v.seeds[-1]}, {len(v.seeds)} of them, trained at "
                  f"{len(commits)} commit{'s' if len(commits) > 1 else ''} — {made} — on a machine the runs do not "
                  "record (\"Machines\"), after the margin and candidates were fixed; the selection procedure below "
                  "was committed after the first of these runs had finished, and an interim result was published "
                  f"before the last: \"Order of decisions\"): token PPO {best} (its best "
                  f"λ on the exploration seeds {exploration[0]}-{exploration[-1]}) against MA-PPO's best of "
                  f"{', '.join(dict.fromkeys(f.best_b for f in v.folds))} among "
                  f"{', '.join(mappo_family(groups, v.seeds))} (chosen on one half of the fresh seeds, compared on the "
                  "other, both ways).", "", *VERDICT_HEADER, *verdict_rows(confirmed, tests, "confirmation"), "",
                  *sensitivity_lines(groups, tests)]
    if explored:
        ppo, mappo = token_ppo_family(groups, exploration), mappo_family(groups, exploration)
        lines += [f"**Exploration** (seeds {exploration[0]}-{exploration[-1]}; the margin was fixed after them): "
                  f"token PPO at λ ∈ {{{', '.join(f'{arm_lambda(a):g}' for a in ppo)}}} against MA-PPO's "
                  f"{', '.join(mappo)}, each family's best chosen on one half of the seeds and compared on the other, "
                  "both ways.", "", *VERDICT_HEADER, *verdict_rows(explored, tests, "exploration"), ""]
    return lines


def floored_groups(groups: Dict[str, Dict[int, dict]]) -> Dict[str, Dict[int, dict]]:
    """The runs with each final gold floored for collapse (:func:`evaluation.study_inference.collapse_floored`)."""
    return {arm: {seed: {**run, "gold": [*run["gold"][:-1], collapse_floored(run["gold"], run["length"])]}
                  for seed, run in runs.items()} for arm, runs in groups.items()}


SENSITIVITY = ("collapse-floored gold", "seeds without a collapsed run")


def collapse_sensitivity(groups: Dict[str, Dict[int, dict]]) -> Dict[str, Verdict]:
    """The pre-registered verdict on gold, done again two ways that a collapsed run cannot win: every run's final
    gold floored for collapse (the whole procedure, token PPO's λ choice included), and the fresh seeds on which no
    run of the verdict's arms ends collapsed (the same choice of arms, halves of the seeds left)."""
    best, primary = confirmation_verdicts(groups)
    if not primary:
        return {}
    seeds, family = primary["gold"].seeds, mappo_family(groups, primary["gold"].seeds)
    kept = [s for s in seeds if not any(groups[a][s]["length"][-1] < COLLAPSE_FRACTION * groups[a][s]["length"][0]
                                        for a in (best, *family))]
    found = {SENSITIVITY[0]: confirmation_verdicts(floored_groups(groups))[1].get("gold"),
             SENSITIVITY[1]: verdicts(groups, [best], family, kept).get("gold")}
    return {name: v for name, v in found.items() if v}


def sensitivity_lines(groups: Dict[str, Dict[int, dict]], tests: Dict[TestKey, AdjustedTest]) -> List[str]:
    found = collapse_sensitivity(groups)
    if not found:
        return []
    best, confirmed = confirmation_verdicts(groups)
    primary = confirmed["gold"]
    ended = []
    for arm in (best, *mappo_family(groups, primary.seeds)):
        finals = {s: groups[arm][s]["gold"][-1] for s in primary.seeds}
        ranked = sorted(finals, key=finals.get, reverse=True)
        ended += [f"{arm} seed {s} (final length {groups[arm][s]['length'][-1]:.0f} tokens, gold rank "
                  f"{ranked.index(s) + 1} of {len(ranked)} in its arm)" for s in primary.seeds
                  if groups[arm][s]["length"][-1] < COLLAPSE_FRACTION * groups[arm][s]["length"][0]]
    rows = []
    for name, v in found.items():
        test = tests["verdict", name, "gold"]
        chosen = "; ".join(f"on {_seed_text(f.select_seeds)[6:]}: {f.best_b} vs {f.best_a}" for f in v.folds)
        rows.append(f"| {name} | {len(v.seeds)} | {chosen} | {v.diff.text()} | {v.ahead}/{v.diff.n} | {format_p(v.p)} | "
                    f"{format_p(test.p_holm)} | {test.equivalence.text()} | "
                    f"{reading(v.diff.mean, test.p_holm, test.equivalence, 'MA-PPO', 'token PPO')} |")
    return [f"**Collapse sensitivity** (beside the primary gold row above, {primary.diff.text()}): gold rewards "
            f"collapse on this task (a short answer keeps the opening's sentiment words); runs of the compared arms "
            f"that end collapsed: {'; '.join(ended) or 'none'}. *Collapse-floored gold*: a run whose final eval length is below "
            f"{COLLAPSE_FRACTION:.0%} of its step-0 length scores its step-0 gold (no gain), and the whole procedure "
            "is run again; *seeds without a collapsed run*: the fresh seeds on which no run of the compared arms ends "
            "collapsed, halved again. Holm over these two (family \"collapse sensitivity\").", "",
            "| analysis | seeds | chosen (by gold, on the other half) | MA-PPO best − token PPO best [95% t CI] | ahead "
            "| p | Holm p | equivalence | reading |", "|---|---|---|---|---|---|---|---|---|", *rows, ""]


def confirmation_lines(summaries: Sequence[dict]) -> List[str]:
    """The confirmation's arms on the fresh seeds against token PPO's exploration-best λ, and the fresh seeds of
    arms run in both seed sets against the exploration's prediction interval of a new seed."""
    table = confirmation_table(summaries)
    if not table:
        return []
    groups = by_arm(summaries, "long")
    exploration, confirmation = seed_split(groups)
    first = CONFIRMATION_TIERS["long"][0][0]
    step0 = {name: (groups["ppo"][seeds[0]]["rm"][0], groups["ppo"][seeds[0]]["gold"][0]) if name == "exploration"
             else (groups[first][seeds[0]]["rm"][0], groups[first][seeds[0]]["gold"][0])
             for name, seeds in (("exploration", exploration), ("confirmation", confirmation))}
    lines = ["#### Confirmation: every arm on the fresh seeds against token PPO at its exploration-best λ", "",
             "Evaluated every 12 iterations (`CONFIRMATION_FLAGS`; the evaluations at 12, 24, 36 and 48 equal an "
             "every-4 run's), so a collapse between evaluations can go unseen here. Holm p over this table's "
             "comparisons (both metrics). The confirmation ran on another machine than the exploration, and its bits "
             "differ: the step-0 evaluation every run shares (the SFT policy, the same sampling seed) scores RM "
             f"{step0['confirmation'][0]:.4f}, gold {step0['confirmation'][1]:.5f} there against "
             f"{step0['exploration'][0]:.4f}, {step0['exploration'][1]:.5f} in the exploration (with the same code; "
             "the SFT and reward-model weights trained there were bit-identical under transformers 5.19/numpy 2.3.5 "
             "and 5.23/2.4.6). So fresh and exploration seeds are never paired: the fresh seeds are compared among "
             "themselves.", "", *table, ""]
    unseen = unseen_seed_check(by_arm(summaries, "long"))
    if unseen:
        lines += ["Fresh seeds against the published 95% prediction interval of one new seed's final gold (from the "
                  "exploration seeds): " + "; ".join(f"{arm}: {inside} of {runs} inside [{low:.3f}, {high:.3f}]"
                                                     for arm, (inside, runs, (low, high)) in unseen.items()) + ".", ""]
    return lines


@dataclass(frozen=True)
class ModelSeedComparison:
    """A (token PPO, MA-PPO) pair of :data:`evaluation.study.MODEL_SEED_PAIRS` (``method`` − ``baseline``, final
    score) on each SFT + RM seed of the long task: per model seed the paired difference over the first ``n`` PPO
    seeds both arms share there (``n``: the fewest any model seed has), and across them
    :func:`evaluation.study_inference.across_model_seeds`."""

    baseline: str
    method: str
    metric: str
    model_seeds: Tuple[int, ...]
    seeds: Tuple[Tuple[int, ...], ...]
    """Per model seed, its PPO seeds."""
    per_model_seed: Tuple[Paired, ...]
    step0: Tuple[float, ...]
    """The SFT policy's score at step 0 on each model seed."""
    across: AcrossModelSeeds


def model_seed_comparison(summaries: Sequence[dict], pair: Sequence[str],
                          metric: str = "gold") -> Optional[ModelSeedComparison]:
    """None until at least two SFT + RM seeds hold both arms of ``pair`` on two common PPO seeds."""
    tasks = {task: TASKS[task].model_seed for task in ("long", *model_seed_tasks("long"))}
    baseline, method = pair
    groups = {task: by_arm(summaries, task) for task in tasks}
    shared = {task: common_seeds(groups[task][baseline], groups[task][method]) for task in tasks
              if baseline in groups[task] and method in groups[task]}
    shared = {task: seeds for task, seeds in shared.items() if len(seeds) >= 2}
    if len(shared) < 2:
        return None
    n = min(len(seeds) for seeds in shared.values())
    seeds = {task: found[:n] for task, found in shared.items()}
    finals = {t: {arm: [groups[t][arm][s][metric][-1] for s in seeds[t]] for arm in pair} for t in shared}
    diffs = [[m - b for b, m in zip(finals[t][baseline], finals[t][method])] for t in shared]
    return ModelSeedComparison(baseline, method, metric, tuple(tasks[t] for t in shared),
                               tuple(tuple(seeds[t]) for t in shared),
                               tuple(paired_difference(finals[t][baseline], finals[t][method]) for t in shared),
                               tuple(groups[t][baseline][seeds[t][0]][metric][0] for t in shared),
                               across_model_seeds(diffs, EQUIVALENCE_MARGINS[metric]))


def model_seed_comparisons(summaries: Sequence[dict]) -> Dict[Tuple[str, str], Dict[str, ModelSeedComparison]]:
    """Every pair of :data:`evaluation.study.MODEL_SEED_PAIRS` measured on two or more SFT + RM seeds, both metrics."""
    found = {}
    for pair in MODEL_SEED_PAIRS["long"]:
        metrics = {metric: model_seed_comparison(summaries, pair, metric) for metric in ("gold", "rm")}
        if metrics["gold"]:
            found[pair] = metrics
    return found


def model_seed_lines(summaries: Sequence[dict]) -> List[str]:
    """The report's section on the SFT + RM seeds: per pair, per model seed and across them, both metrics."""
    found = model_seed_comparisons(summaries)
    if not found:
        return []
    tests = multiplicity(summaries)
    tasks = ", ".join(model_seed_tasks("long"))
    lines = ["#### Two pairs on several SFT + RM seeds", "",
             "MA-PPO n = 5 − token PPO at the same λ (final score, paired by PPO seed), with the SFT and reward model "
             f"trained from each SFT + RM seed (`MODEL_SEED_TASKS`: {tasks} beside the long task's own 1234; the seed "
             "sets the base model's initialisation, the SFT / RM / PPO partition of the training rows and their "
             "order): the confirmation's pre-registered pair at λ = 1, and the paper's at λ = 0.95 (on seed 1234 its "
             "runs are the exploration's, made on another machine; on the others, fresh seeds: for this pair the machine kind "
             "is confounded with the SFT + RM seed). The *across* row's "
             "interval is Student's t over the model seeds' means (degrees of freedom: model seeds − 1): it covers "
             "the SFT + RM seed as well as the PPO seed; its equivalence test is TOST over the same means. RM "
             "differences are each model seed's own reward model's scale.", "",
             "| pair | SFT + RM seed | PPO seeds | step-0 gold (SFT policy) | step-0 RM | gold difference [t CI] (ahead) "
             "| RM difference [t CI] (ahead) |",
             "|---|---|---|---|---|---|---|"]
    notes = []
    for (baseline, method), metrics in found.items():
        gold, rm = metrics["gold"], metrics["rm"]
        name = f"{method} − {baseline}"
        for i, model_seed in enumerate(gold.model_seeds):
            cells = [f"{m.per_model_seed[i].diff.text(d)} ({m.per_model_seed[i].ahead}/{m.per_model_seed[i].diff.n})"
                     for m, d in ((gold, 3), (rm, 2))]
            lines.append(f"| {name} | {model_seed} | {_seed_text(gold.seeds[i])[6:]} | {gold.step0[i]:.4f} | "
                         f"{rm.step0[i]:.3f} | {cells[0]} | {cells[1]} |")
        equivalences = {m.metric: tests["model seeds", (baseline, method), m.metric].equivalence for m in (gold, rm)}
        cells = [f"{m.across.mean:.{d}f} [{m.across.low:.{d}f}, {m.across.high:.{d}f}]; "
                 f"{'equivalent' if equivalences[m.metric].equivalent else 'not shown equivalent'} within "
                 f"±{m.across.equivalence.margin:g} (90% CI [{m.across.equivalence.low:.{d}f}, "
                 f"{m.across.equivalence.high:.{d}f}]; Holm-adjusted TOST p {format_p(equivalences[m.metric].p)})"
                 for m, d in ((gold, 3), (rm, 2))]
        lines.append(f"| {name} | across {len(gold.model_seeds)} | {len(gold.seeds[0])} each | | | {cells[0]} | "
                     f"{cells[1]} |")
        for task in model_seed_tasks("long"):
            found_here = collapses({arm: runs for arm, runs in by_arm(summaries, task).items() if arm in (baseline, method)})
            notes.append(f"- {name}, collapses on {task} (eval length below {COLLAPSE_FRACTION:.0%} of step 0, evaluated "
                         "every 12 iterations): " + ("; ".join(f"{arm} seed {seed}: {event.text()}"
                                                             for arm, events in found_here.items()
                                                             for seed, event in events.items()) or "none") + ".")
        notes += [f"- {name}, {m.metric}: the difference's standard deviation across PPO seeds (within a model seed) "
                  f"{m.across.within_sd:.4f}, across model seeds {m.across.between_sd:.4f} (method of moments); that "
                  f"the model seeds' mean differences are equal: one-way ANOVA p {format_p(m.across.p_differ)}."
                  for m in (gold, rm)]
    return lines + [""] + notes + [""]


def new_seed_lines(summaries: Sequence[dict]) -> List[str]:
    """Prediction intervals for the pairs of :data:`evaluation.study.MODEL_SEED_PAIRS` (each arm's final gold and the
    pair's difference): a new PPO seed on SFT + RM seed 1234, and a new SFT + RM seed
    (:func:`evaluation.study_inference.new_model_seed_interval`)."""
    found = model_seed_comparisons(summaries)
    if not found:
        return []
    tasks = {TASKS[t].model_seed: t for t in ("long", *model_seed_tasks("long"))}
    home = TASKS["long"].model_seed
    lines = ["#### Where a new seed would land", "",
             "95% prediction intervals of final gold, from the runs above (normal model: value = μ + SFT + RM seed + PPO "
             f"seed). *New PPO seed on {home}*: Student's t over that model seed's PPO seeds, s·√(1 + 1/n). *New SFT + RM "
             "seed, mean of n PPO seeds*: t over the model seeds' means (model seeds − 1 degrees of freedom), "
             "s_m·√(1 + 1/S). *One run on a new SFT + RM seed*: the same t with s_m²(1 + 1/S) + s_w²(1 − 1/n) (s_w² "
             "the pooled within-model-seed variance). With 3 model seeds these have 2 degrees of freedom and are wide; "
             "estimated on the study's machines only (\"Machines\"): a machine kind not in the study adds a component "
             "these intervals do not contain.", "",
             f"| pair | value | SFT + RM seeds | new PPO seed on {home} | new SFT + RM seed, mean of n PPO seeds | "
             "one run on a new SFT + RM seed |", "|---|---|---|---|---|---|"]
    for (baseline, method), metrics in found.items():
        gold = metrics["gold"]
        values = {arm: [[by_arm(summaries, tasks[m])[arm][s]["gold"][-1] for s in seeds]
                        for m, seeds in zip(gold.model_seeds, gold.seeds)] for arm in (baseline, method)}
        values[f"{method} − {baseline}"] = [[a - b for a, b in zip(x, y)]
                                            for x, y in zip(values[method], values[baseline])]
        for name, per_model_seed in values.items():
            at_home = t_interval(per_model_seed[gold.model_seeds.index(home)], new_seed=True)
            new = new_model_seed_interval(per_model_seed)
            lines.append(f"| {method} − {baseline} | {name} | {', '.join(map(str, gold.model_seeds))} "
                         f"(n = {len(gold.seeds[0])}) | [{at_home[0]:.3f}, {at_home[1]:.3f}] | {new.mean:.3f} "
                         f"[{new.mean_low:.3f}, {new.mean_high:.3f}] | [{new.run_low:.3f}, {new.run_high:.3f}] |")
    return lines + [""]


def unseen_seed_check(groups: Dict[str, Dict[int, dict]], metric: str = "gold") -> Dict[str, Tuple[int, int, Tuple]]:
    """Per arm run on both seed sets: how many confirmation seeds' final ``metric`` lie inside the exploration
    seeds' 95% prediction interval of a new seed: (inside, runs, (low, high))."""
    exploration, confirmation = seed_split(groups)
    found = {}
    for arm, runs in groups.items():
        fresh = [s for s in confirmation if s in runs]
        old = [s for s in exploration if s in runs]
        if fresh and len(old) >= 2:
            estimate = mean_estimate([runs[s][metric][-1] for s in old])
            inside = sum(estimate.new_low <= runs[s][metric][-1] <= estimate.new_high for s in fresh)
            found[arm] = (inside, len(fresh), (estimate.new_low, estimate.new_high))
    return found


def same_lambda_comparisons(groups: Dict[str, Dict[int, dict]]) -> Dict[Tuple[str, str, str], dict]:
    """MA-PPO (n = 5 and the entropy rule) − token PPO at the same λ, per metric, paired by seed: the difference;
    keyed by (MA-PPO arm, token PPO arm, metric) (their tests: :func:`multiplicity`)."""
    ppo_at = {arm_lambda(a): a for a in LAMBDA_SWEEP if a in groups}
    found = {}
    for rule in MAPPO_LAMBDAS.values():
        for arm in (a for a in rule if a in groups and arm_lambda(a) in ppo_at):
            base = ppo_at[arm_lambda(arm)]
            seeds = common_seeds(groups[arm], groups[base])
            if len(seeds) < 2:
                continue
            for metric in ("gold", "rm"):
                diffs = [groups[arm][s][metric][-1] - groups[base][s][metric][-1] for s in seeds]
                found[arm, base, metric] = {"diff": paired_difference([0.0] * len(diffs), diffs)}
    return found


def mappo_lambda_lines(groups: Dict[str, Dict[int, dict]], tests: Dict[TestKey, AdjustedTest]) -> List[str]:
    """MA-PPO's own λ sweep beside token PPO's: finals per arm and MA-PPO − token PPO at the same λ."""
    found = same_lambda_comparisons(groups)
    if not any(arm_lambda(arm) != 0.95 for arm, _, _ in found):
        return []
    lines = ["#### MA-PPO's λ beside token PPO's λ", "",
             "Each MA-PPO arm paired by seed with token PPO at the same λ; p: two-sided paired t test; Holm p and the "
             "TOST p: Holm-adjusted within the test's family (named in the row; \"Families of tests\"); equivalence: "
             f"TOST against ±Δ ({MARGIN_RULE}).", "",
             "| MA-PPO arm | vs | seeds | metric | MA-PPO final | token PPO final | difference [95% t CI] | ahead | "
             "family | Holm p | equivalence | reading |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (arm, base, metric), c in found.items():
        seeds = common_seeds(groups[arm], groups[base])
        own, other = (mean_estimate([groups[a][s][metric][-1] for s in seeds]).text() for a in (arm, base))
        d = c["diff"]
        test = adjusted_test(tests, "long", arm, base, metric, seeds)
        lines.append(f"| {arm} | {base} | {len(seeds)} | {metric} | {own} | {other} | {d.diff.text()} | "
                     f"{d.ahead}/{d.diff.n} | {test.family} | {format_p(test.p_holm)} | {test.equivalence.text()} | "
                     f"{reading(d.diff.mean, test.p_holm, test.equivalence, 'MA-PPO', 'token PPO')} |")
    return lines + [""]


# ---- one multiplicity rule: families of tests ------------------------------------------------------------------

TestKey = Tuple
"""``(task, method, baseline, metric, seeds)`` of a paired comparison of final scores, or ``("verdict", procedure,
metric)``, or ``("model seeds", (baseline, method), metric)``."""


def _paired(groups: Dict[str, Dict[int, dict]], task: str, method: str, base: str, seeds: Sequence[int]
            ) -> Dict[TestKey, Tuple[List[float], float]]:
    return {(task, method, base, metric, tuple(seeds)): ([groups[method][s][metric][-1] - groups[base][s][metric][-1]
                                                          for s in seeds], EQUIVALENCE_MARGINS[metric])
            for metric in ("gold", "rm")}


def confirmation_pairs(groups: Dict[str, Dict[int, dict]]) -> Tuple[Optional[str], Dict[str, List[int]]]:
    """(token PPO's exploration-best arm, every arm run on the fresh seeds → the fresh seeds it shares with that
    arm, two or more); (None, {}) before the confirmation."""
    best, found = confirmation_verdicts(groups)
    if not found:
        return None, {}
    fresh = seed_split(groups)[1]
    paired = {a: [s for s in fresh if s in groups[a] and s in groups[best]]
              for a in (*LAMBDA_SWEEP, *mappo_family(groups, ())) if a in groups}
    return best, {a: seeds for a, seeds in paired.items() if len(seeds) >= 2}


def comparison_families(summaries: Sequence[dict]) -> Dict[str, Tuple[str, Dict[TestKey, Tuple[List[float], float]]]]:
    """Every test the report and the README print, in families, in this order (a comparison printed in two tables
    belongs to the first family that holds it): name → (what it holds, {key: (paired differences, margin)})."""
    groups = {task: by_arm(summaries, task) for task in TASKS}
    long = groups["long"]
    families: Dict[str, Tuple[str, Dict]] = {}
    seen = set()

    def add(name, what, tests):
        kept = {key: value for key, value in tests.items() if _canonical(key) not in seen}
        seen.update(_canonical(key) for key in kept)
        families[name] = (what, kept)

    best, confirmed = confirmation_verdicts(long)
    add("pre-registered verdict", "the confirmation's MA-PPO best − token PPO best, gold and RM (the headline)",
        {("verdict", "confirmation", m): ([d for f in v.folds for d in f.diffs], EQUIVALENCE_MARGINS[m])
         for m, v in confirmed.items()})
    tests = {}
    best, paired = confirmation_pairs(long)
    for arm, seeds in paired.items():
        if arm != best:
            tests.update(_paired(long, "long", arm, best, seeds))
    add("confirmation", "every other arm on the fresh seeds − token PPO's exploration-best λ, both metrics", tests)
    tests = {}
    for task, arms in README_ARMS.items():
        for arm in (a for a in arms if a in groups[task] and a != "ppo" and "ppo" in groups[task]):
            seeds = common_seeds(groups[task]["ppo"], groups[task][arm])
            if len(seeds) >= 2:
                tests.update(_paired(groups[task], task, arm, "ppo", seeds))
    add("exploration against PPO", "every arm − PPO at λ = 0.95 on seeds 1-8, both tasks and metrics (the README's "
        "first table)", tests)
    tests = {}
    for arm, base, _ in same_lambda_comparisons(long):
        tests.update(_paired(long, "long", arm, base, common_seeds(long[arm], long[base])))
    add("same λ", "MA-PPO − token PPO at the same λ not already above, both metrics", tests)
    tests = {}
    for task in TASKS:
        for arm in (a for a in sweep_arms(groups[task], task) if a != "mappo"):
            seeds = common_seeds(groups[task][arm], groups[task]["mappo"])
            if len(seeds) >= 2:
                tests.update(_paired(groups[task], task, arm, "mappo", seeds))
    add("against MA-PPO n = 5", "every other arm of the λ / n table − MA-PPO n = 5 not already above, both tasks "
        "and metrics", tests)
    add("exploration verdict", "the exploration's MA-PPO best − token PPO best, gold and RM (not pre-registered)",
        {("verdict", "exploration", m): ([d for f in v.folds for d in f.diffs], EQUIVALENCE_MARGINS[m])
         for m, v in exploration_verdicts(long).items()})
    add("collapse sensitivity", "the pre-registered verdict's gold with collapsed runs floored, and without the seeds "
        "of collapsed runs", {("verdict", name, "gold"): ([d for f in v.folds for d in f.diffs],
                                                         EQUIVALENCE_MARGINS["gold"])
                              for name, v in collapse_sensitivity(long).items()})
    add("across SFT + RM seeds", "each pair of `MODEL_SEED_PAIRS` over the SFT + RM seeds' means, both metrics",
        {("model seeds", pair, m): (list(c.across.means), EQUIVALENCE_MARGINS[m])
         for pair, metrics in model_seed_comparisons(summaries).items() for m, c in metrics.items()})
    return families


def _canonical(key: TestKey) -> TestKey:
    """A paired comparison and its reverse are one test."""
    if len(key) == 5:
        task, method, base, metric, seeds = key
        return (task, *sorted((method, base)), metric, seeds)
    return key


def multiplicity(summaries: Sequence[dict]) -> Dict[TestKey, AdjustedTest]:
    """Every test of :func:`comparison_families`, Holm-adjusted within its family, differences and equivalences alike
    (:func:`evaluation.study_inference.adjust_families`)."""
    return adjust_families({name: tests for name, (_, tests) in comparison_families(summaries).items()})


def adjusted_test(tests: Dict[TestKey, AdjustedTest], task: str, method: str, base: str, metric: str,
                  seeds: Sequence[int]) -> AdjustedTest:
    """The test of ``method − base`` on ``seeds`` (its equivalence interval in that direction)."""
    key = (task, method, base, metric, tuple(seeds))
    if key in tests:
        return tests[key]
    found = tests[(task, base, method, metric, tuple(seeds))]
    return AdjustedTest(found.family, found.p, found.p_holm, found.equivalence.flipped())


def family_lines(summaries: Sequence[dict]) -> List[str]:
    """The report's statement of the multiplicity rule and its families."""
    families = comparison_families(summaries)
    return ["#### Families of tests: one multiplicity rule", "",
            "Every p printed in this report and the README is Holm-adjusted within one family of tests, and so is "
            "every equivalence claim: the TOST p-values of a family are Holm-adjusted over the same family (an "
            "equivalence is claimed when the adjusted TOST p < 0.05), so a difference and an equivalence are held to "
            "the same family-wise error rate. A comparison printed in two tables is one test, in the first family "
            "below that holds it, and prints the same p everywhere.", "",
            "| family | tests | what it holds |", "|---|---|---|",
            *(f"| {name} | {len(tests)} | {what} |" for name, (what, tests) in families.items() if tests), ""]


def collapses(groups: Dict[str, Dict[int, dict]]) -> Dict[str, Dict[int, object]]:
    """Per arm, the collapsed runs (:func:`evaluation.study_inference.collapse`) by seed."""
    found: Dict[str, Dict[int, object]] = {}
    for arm in (a for a in ARMS if a in groups):
        for seed, run in sorted(groups[arm].items()):
            event = collapse(run["steps"], run["length"])
            if event:
                found.setdefault(arm, {})[seed] = event
    return found


def collapse_lines(summaries: Sequence[dict], task: str) -> List[str]:
    groups = by_arm(summaries, task)
    found = collapses(groups)
    lines = [f"#### Collapses: eval response length below {COLLAPSE_FRACTION:.0%} of its step-0 length", "",
             "Every run whose eval response length fell below half of its length at step 0 at some evaluation "
             "(*ends collapsed*: still below at the end). Length is the detector the committed summaries allow "
             "(the policy entropy is logged per training step, not kept in `runs.jsonl`).", "",
             "| arm | seeds | collapsed | ends collapsed | runs (seed: start → lowest at step, final) |",
             "|---|---|---|---|---|"]
    for arm in (a for a in ARMS if a in groups):
        events = found.get(arm, {})
        runs = "; ".join(f"{seed}: {event.text()}" for seed, event in events.items()) or "—"
        lines.append(f"| {arm} | {len(groups[arm])} | {len(events)} | {sum(e.ends_collapsed for e in events.values())}"
                     f" | {runs} |")
    return lines + [""]


def plateau(groups: Dict[str, Dict[int, dict]], arm: str, metric: str = "gold") -> Tuple[Estimate, float]:
    """The arm's last-quarter change (seed mean, t CI) and that change as a share of its whole rise (step 0 to
    final, seed means)."""
    runs = groups[arm]
    seeds = common_seeds(runs)
    late = mean_estimate([last_quarter_change(runs[s]["steps"], runs[s][metric]) for s in seeds])
    rise = statistics.fmean(runs[s][metric][-1] - runs[s][metric][0] for s in seeds)
    return late, late.mean / rise if rise else math.nan


def convergence_lines(groups: Dict[str, Dict[int, dict]]) -> List[str]:
    """Whether each arm's final gold is a plateau: its last-quarter change, and what an end to the rise would cost."""
    arms = [a for a in ARMS if a in groups]
    rows = {arm: plateau(groups, arm) for arm in arms}
    still = [arm for arm, (late, _) in rows.items() if late.t_low > 0]
    lines = ["#### Plateau: is the final gold a plateau or a stopping point?", "",
             f"{len(still)} of {len(arms)} arms' gold still rises over the last quarter of training (t CI above 0): "
             f"{', '.join(still) or 'none'}. A plateau test needs longer runs: the cost of a run grows with its "
             "steps (report, Cost), so doubling every arm's steps doubles the study's CPU time.", "",
             "| arm | seeds | gold change over the last quarter [t CI] | share of the whole rise |", "|---|---|---|---|"]
    for arm, (late, share) in rows.items():
        lines.append(f"| {arm} | {late.n} | {late.text(4)} | {share:.0%} |")
    return lines + [""]


def ordering_agreement(groups: Dict[str, Dict[int, dict]], metric: str = "gold") -> Tuple[float, int]:
    """Kendall's τ between the arms' order by mean final ``metric`` and by mean AUC, and the number of arms."""
    arms = [a for a in ARMS if a in groups]
    finals = [statistics.fmean(r[metric][-1] for r in groups[a].values()) for a in arms]
    aucs = [statistics.fmean(area_under_curve(r["steps"], r[metric]) for r in groups[a].values()) for a in arms]
    return float(scipy_stats.kendalltau(finals, aucs).statistic), len(arms)


def parity_by_stop(groups: Dict[str, Dict[int, dict]], baseline: str, arm: str, stops: Sequence[int],
                   metric: str = "gold") -> Dict[int, ParityResult]:
    """Parity of ``arm`` against ``baseline`` on the curves cut at each step of ``stops``: how much the speed-up
    depends on where training stopped."""
    seeds = common_seeds(groups[baseline], groups[arm])
    steps = groups[arm][seeds[0]]["steps"]
    result = {}
    for stop in stops:
        keep = [i for i, step in enumerate(steps) if step <= stop]
        cut = [steps[i] for i in keep]
        result[stop] = parity(cut, [[groups[baseline][s][metric][i] for i in keep] for s in seeds],
                              [[groups[arm][s][metric][i] for i in keep] for s in seeds])
    return result


def not_run_lines(summaries: Sequence[dict]) -> List[str]:
    """What the study did not run, with its cost in CPU seconds from the long task's runs (markers' CPU time)."""
    groups = by_arm(summaries, "long")
    cpus = [s["cpu_s"] for s in summaries if s["task"] == "long" and s.get("cpu_s")]
    if not cpus or "ppo" not in groups:
        return []
    cpu = statistics.fmean(cpus)
    exploration, confirmation = seed_split(groups)
    fresh = confirmation_seeds(len(exploration))
    missing = [(arm, seed) for tier in CONFIRMATION_TIERS["long"] for seed in fresh for arm in tier
               if seed not in groups.get(arm, {})]
    arms = sorted({arm for arm in groups if set(exploration) <= set(groups[arm])})
    hours = 3600 * 2
    lines = ["## What was not run, and what it would cost", "",
             f"Costs from this study's long-task runs: {cpu:.0f} CPU s per run on average (markers), so 2 free cores "
             f"train {hours / cpu:.0f} runs per hour; the machines it ran on were shared with other jobs.", ""]
    best, confirmed = confirmation_verdicts(groups)
    fresh_cpus = [run["cpu_s"] for runs in groups.values() for seed, run in runs.items()
                  if seed in confirmation and run.get("cpu_s")]
    if fresh_cpus:
        cpu = statistics.fmean(fresh_cpus)
        lines += [f"The confirmation's runs cost {cpu:.0f} CPU s each on its machine (evaluating every 12 "
                  "iterations; that machine's CPU seconds ran slower under the load it shared), used below.", ""]
    if confirmed and not multiplicity(summaries)["verdict", "confirmation", "gold"].equivalence.equivalent:
        gold = confirmed["gold"]
        diffs = [d for fold in gold.folds for d in fold.diffs]
        need = seeds_for_equivalence(diffs, EQUIVALENCE_MARGINS["gold"])
        procedure_arms = 1 + len(mappo_family(groups, gold.seeds))  # the procedure chooses among every candidate on every seed
        more = procedure_arms * (need - gold.diff.n) if need else 0
        lines.append("- Seeds to decide the confirmation's gold comparison (best against best): " + (
            f"if further seeds kept the observed mean ({gold.diff.mean:+.4f}) and spread, equivalence within "
            f"±{EQUIVALENCE_MARGINS['gold']:g} would show at {need} seeds per arm; the procedure trains all {procedure_arms} "
            f"of its arms ({best} and MA-PPO's {procedure_arms - 1} candidates) on each seed, so {need - gold.diff.n} more seeds "
            f"are {more} more runs, {more * cpu / 3600:.1f} CPU hours" if need else
            "the observed mean lies outside the margin: more seeds would test a difference, not equivalence") + ".")
    if missing:
        lines.append(f"- The rest of the confirmation ({len(missing)} runs: "
                     + ", ".join(f"{arm} {_seed_text(sorted(s for a, s in missing if a == arm))}"
                                 for arm in dict.fromkeys(a for a, _ in missing))
                     + f"): {len(missing) * cpu / 3600:.1f} CPU hours (`bash scripts/reproduce/study.sh` trains them "
                     "next).")
    further_cpus = [s["cpu_s"] for s in summaries if s["task"] in model_seed_tasks("long") and s.get("cpu_s")]
    comparisons = model_seed_comparisons(summaries)
    pre_registered = tuple(CONFIRMATION_TIERS["long"][0])
    if pre_registered in comparisons and further_cpus:
        gold = comparisons[pre_registered]["gold"]
        runs = 3 * 2 * len(gold.seeds[0])
        further = statistics.fmean(further_cpus)
        lines.append(f"- The pre-registered pair ({pre_registered[1]} − {pre_registered[0]}) on 3 more SFT + RM seeds "
                     f"({len(gold.model_seeds) + 3} in all, {len(gold.seeds[0])} PPO seeds each): {runs} runs "
                     f"(3 × 2 arms × {len(gold.seeds[0])}), {runs * further / 3600:.1f} CPU hours at the further SFT + "
                     f"RM seeds' {further:.0f} CPU s per run, plus 3 × (SFT + RM: about 4 minutes of 2 cores); where "
                     "its difference would land on a new SFT + RM seed: \"Where a new seed would land\".")
    per_run = statistics.fmean(further_cpus) if further_cpus else cpu  # the further SFT + RM seeds' own runs
    for (baseline, method), metrics in comparisons.items():
        gold = metrics["gold"].across
        if multiplicity(summaries)["model seeds", (baseline, method), "gold"].equivalence.equivalent:
            continue
        need = seeds_for_equivalence(gold.means, EQUIVALENCE_MARGINS["gold"])
        runs = 2 * len(metrics["gold"].seeds[0])
        lines.append(f"- SFT + RM seeds to decide {method} − {baseline} on gold: the interval across model seeds "
                     "narrows with model seeds, not PPO seeds; " + (
                         f"if further model seeds kept the observed mean ({gold.mean:+.4f}) and spread of the model "
                         f"seeds' means, equivalence within ±{EQUIVALENCE_MARGINS['gold']:g} would show at {need} "
                         f"model seeds ({need - len(gold.means)} more, each an SFT and a reward model and {runs} runs: "
                         f"{(need - len(gold.means)) * runs * per_run / 3600:.1f} CPU hours plus the models)"
                         if need else "the observed mean lies outside the margin: more model seeds would test a "
                         "difference, not equivalence") + ".")
    further = [(task, arm, seed) for pair in MODEL_SEED_PAIRS["long"] for seed in fresh
               for task in model_seed_tasks("long") for arm in pair
               if seed not in by_arm(summaries, task).get(arm, {})]
    if further:
        lines.append(f"- The pairs of `MODEL_SEED_PAIRS` on the further SFT + RM seeds ({len(further)} runs: "
                     + ", ".join(f"{task}/{arm} {_seed_text(sorted(s for t, a, s in further if (t, a) == (task, arm)))}"
                                 for task, arm in sorted(dict.fromkeys((t, a) for t, a, _ in further),
                                                         key=lambda pair: pair[0]))
                     + f"): {len(further) * cpu / 3600:.1f} CPU hours plus 2 × (SFT + RM: about 4 minutes of 2 cores) "
                     "where they are missing (`bash scripts/reproduce/study.sh` trains them after the confirmation).")
    plateau_hours = len(arms) * len(exploration) * cpu / 3600
    lines += [f"- A plateau: doubling the long task's {groups['ppo'][exploration[0]]['steps'][-1]} iterations for the "
              f"{len(arms)} arms × {len(exploration)} exploration seeds costs another {plateau_hours:.1f} CPU hours, "
              "and whether 96 iterations reach a plateau is itself unknown.",
              "- Several evaluation sampling seeds for every run: a run's evaluations are seeded (`--eval_seed`); "
              "drawing its final actor again under other seeds is `python -m evaluation.study_positions "
              "--sample_seeds ...` (report, \"The evaluation's own sampling noise\", for the actors kept on the "
              "machine that ran them).", ""]
    return lines


def _seed_text(seeds: Sequence[int]) -> str:
    """Seeds as ranges: 9-12, 14."""
    parts, start = [], None
    for i, seed in enumerate(seeds):
        if start is None:
            start = seed
        if i + 1 == len(seeds) or seeds[i + 1] != seed + 1:
            parts.append(f"{start}-{seed}" if seed != start else f"{seed}")
            start = None
    return "seeds " + ", ".join(parts)


def stopping_lines(groups: Dict[str, Dict[int, dict]], stops: Sequence[int] = (32, 40, 48)) -> List[str]:
    """How much the final-score readings depend on where training stopped: Kendall's τ between the arms' order by
    final gold and by gold AUC, and MA-PPO's gold parity against PPO on the curves cut at each of ``stops``."""
    if "ppo" not in groups or "mappo" not in groups or len(groups) < 3:
        return []
    exploration, _ = seed_split(groups)
    groups = {arm: {s: runs[s] for s in exploration} for arm, runs in groups.items() if set(exploration) <= set(runs)}
    steps = groups["ppo"][exploration[0]]["steps"]
    stops = [stop for stop in stops if stop in steps]
    tau, arms = ordering_agreement(groups)
    by_stop = parity_by_stop(groups, "ppo", "mappo", stops)
    parities = ", ".join(f"{r.speedup:.2f}× at step {stop}" if r.speedup else f"never by step {stop}"
                         for stop, r in by_stop.items())
    return ["#### Where training stopped", "",
            f"Arms ordered by mean final gold and by mean gold AUC: Kendall's τ = {tau:.2f} over {arms} arms (1 = the "
            f"same order). MA-PPO's gold parity against PPO (seed-mean smoothed curves cut at each step): {parities}:"
            " the speed-up depends on where training stopped, because PPO's gold is still rising.", ""]


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
    return lines + [""] + machine_lines(summaries, meta) + history_lines(meta)


def machine_lines(summaries: Sequence[dict], meta: Optional[dict]) -> List[str]:
    """The machines the runs were made on: the record a run row carries (``machine``, written by the runner since
    it records :func:`dschat.utils.machine.machine_record`), and for the rows without one what the study's notes
    know (``study_meta.json``'s ``machines``)."""
    recorded: Dict[str, int] = {}
    for s in summaries:
        if s.get("machine"):
            recorded[machine_line(s["machine"])] = recorded.get(machine_line(s["machine"]), 0) + 1
    bare = [s for s in summaries if not s.get("machine")]
    lines = ["#### Machines", ""]
    if recorded:
        lines += ["Runs that record their machine: " + "; ".join(f"{n} on {line}" for line, n in recorded.items())
                  + "."]
    if bare:
        known = []
        for entry in (meta or {}).get("machines", []):
            runs = sum(s.get("commit") in entry["commits"] for s in bare)
            if runs:
                known.append(f"{runs} runs at {', '.join(f'`{c}`' for c in entry['commits'])}: {entry['known']}")
        lines += [f"{len(bare)} of {len(summaries)} runs do not record their machine (the runner records it with "
                  "every run since this report's commit). What the study's notes know: " + "; ".join(known) + "."]
    lines += ["Every interval in this report is estimated on these machines only: the bits of a run differ by machine "
              "kind (the confirmation section), and no interval contains a machine component.", ""]
    return lines


def history_lines(meta: Optional[dict]) -> List[str]:
    """The order in which the study's runs were made and its decisions taken (``study_meta.json``'s ``history``,
    established from the repository's log)."""
    if not meta or not meta.get("history"):
        return []
    return ["#### Order of decisions", "",
            "From the repository's log (`git log -- docs/study evaluation/study*`), in time order:", "",
            *(f"- {h['when']} UTC (`{h['commit']}`): {h['event']}." for h in meta["history"]), ""]


def report_lines(summaries: Sequence[dict], meta: Optional[dict] = None) -> List[str]:
    lines = ["# PPO vs MA-PPO: the study", "",
             "Generated by `bash scripts/reproduce/study.sh` (`python -m evaluation.study`); every number below is "
             "recomputed from `runs.jsonl` by `python -m evaluation.study_report docs/study/runs.jsonl`; "
             "`bash scripts/reproduce/study.sh --verify` retrains one exploration run, one confirmation run and one on a "
             "further SFT + RM seed from scratch "
             "and requires their first evaluations to equal the committed ones (bit for bit: on the machine and "
             "packages that made them; the exploration's bits did not reproduce on the confirmation's machine, see "
             "the confirmation section).", "",
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
             "training (least-squares slope × span); an interval above 0 means the arm had not converged.", "",
             "**What the intervals cover.** " + VARIATION_COVERED, ""]
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
        if task in MAPPO_LAMBDA_ARMS:  # the task with both λ sweeps and the confirmation
            tests = multiplicity(summaries)
            lines += (family_lines(summaries) + mappo_lambda_lines(groups, tests) + verdict_lines(groups, tests)
                      + confirmation_lines(summaries) + model_seed_lines(summaries) + new_seed_lines(summaries))
        lines += length_lines(summaries, task)
        lines += collapse_lines(summaries, task)
        lines += convergence_lines(groups)
        if task in MAPPO_LAMBDA_ARMS:
            lines += stopping_lines(groups)
        ablations = [a for a in ABLATION_ARMS if a in groups]
        if ablations:
            lines += table(summaries, task, "ppo", ablations, "Further ablations (fewer seeds; paired with PPO)")
        if all(arm in groups for arm in MINI_BATCH_ARMS):
            lines += table(summaries, task, MINI_BATCH_ARMS[0], MINI_BATCH_ARMS,
                           "Several optimizer steps per rollout: MA-PPO vs PPO, both with mini-batch updates")
        missing = [arm for arm in ARMS if arm not in groups]
        if missing:
            lines += [f"Arms without runs on this task: {', '.join(missing)}.", ""]
    return lines + cost_lines(summaries) + not_run_lines(summaries)


README_ARMS = {"short": ("ppo", "mappo", "mappo-entropy"),
               "long": ("ppo", "ppo-lam0.98", "ppo-lam0.99", "ppo-lam1", "mappo", "mappo-lam0.99", "mappo-lam1",
                        "mappo-entropy", "mappo-entropy-lam0.99", "mappo-entropy-lam1", "mappo-n3", "mappo-n10",
                        "mappo-ninf")}
"""The rows of the README's study table (arms with the core seed count); their tests are the family
"exploration against PPO" of :func:`comparison_families`."""


def readme_table(summaries: Sequence[dict]) -> List[str]:
    """The README's summary table, rendered from the same summaries as the report (a test keeps them equal)."""
    lines = ["| task | arm | seeds | final gold [t CI] | gold − PPO [t CI] (ahead) | new seed's gold − PPO | "
             "final RM [t CI] | RM − PPO [t CI] (ahead) | Holm p (gold; RM) | final length | collapsed (at the end) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    tests = multiplicity(summaries)
    for task, arms in README_ARMS.items():
        groups = by_arm(summaries, task)
        for arm in (a for a in arms if a in groups and "ppo" in groups):
            seeds = common_seeds(groups["ppo"], groups[arm])
            if len(seeds) < 2:
                continue  # a confirmation arm: its own table
            cells = []
            for metric in ("gold", "rm"):
                finals = [groups[arm][s][metric][-1] for s in seeds]
                cells.append(mean_estimate(finals).text(3 if metric == "gold" else 2))
                if arm == "ppo":
                    cells += ["—"] if metric == "rm" else ["—", "—"]
                    continue
                d = paired_difference([groups["ppo"][s][metric][-1] for s in seeds], finals)
                cells.append(f"{d.diff.text(3 if metric == 'gold' else 2)} ({d.ahead}/{d.diff.n})")
                if metric == "gold":
                    cells.append(f"[{d.diff.new_low:.3f}, {d.diff.new_high:.3f}]")
            holm_p = ("—" if arm == "ppo" else "; ".join(
                format_p(adjusted_test(tests, task, arm, "ppo", m, seeds).p_holm) for m in ("gold", "rm")))
            length = mean_estimate([groups[arm][s]["length"][-1] for s in seeds]).text(1)
            events = collapses({arm: {s: groups[arm][s] for s in seeds}}).get(arm, {})  # the row's seeds only
            collapsed = f"{len(events)} ({sum(e.ends_collapsed for e in events.values())})"
            lines.append(f"| {task} | {arm} | {len(seeds)} | " + " | ".join(cells)
                         + f" | {holm_p} | {length} | {collapsed} |")
    return lines


def confirmation_table(summaries: Sequence[dict]) -> List[str]:
    """The README's confirmation table: every arm run on the fresh seeds, against token PPO at its exploration-best
    λ on the fresh seeds both ran (paired; an arm of a later tier may have fewer, its ``seeds`` cell says how
    many), with equivalence tested against the margins and Holm's correction over the table's comparisons (both
    metrics)."""
    groups = by_arm(summaries, "long")
    best, paired = confirmation_pairs(groups)
    if not paired:
        return []
    arms = list(paired)
    tests = multiplicity(summaries)
    found_collapses = collapses({a: {s: groups[a][s] for s in paired[a]} for a in arms})
    lines = [f"| arm | seeds | final gold [t CI] | gold − {best} [t CI] (ahead) | final RM [t CI] | RM − {best} [t CI] "
             "(ahead) | Holm p (gold; RM) | equivalent within ±Δ (gold; RM) | final length | collapsed (at the end) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        seeds = paired[arm]
        cells = []
        for metric, digits in (("gold", 3), ("rm", 2)):
            cells.append(mean_estimate([groups[arm][s][metric][-1] for s in seeds]).text(digits))
            if arm == best:
                cells.append("—")
            else:
                diffs = [groups[arm][s][metric][-1] - groups[best][s][metric][-1] for s in seeds]
                cells.append(f"{mean_estimate(diffs).text(digits)} ({sum(d > 0 for d in diffs)}/{len(diffs)})")
        if arm == best:
            holm_p = equivalent = "—"
        else:
            found = {m: adjusted_test(tests, "long", arm, best, m, seeds) for m in ("gold", "rm")}
            holm_p = "; ".join(format_p(found[m].p_holm) for m in ("gold", "rm"))
            equivalent = "; ".join("yes" if found[m].equivalence.equivalent else "no" for m in ("gold", "rm"))
        length = mean_estimate([groups[arm][s]["length"][-1] for s in seeds]).text(1)
        events = found_collapses.get(arm, {})
        lines.append(f"| {arm} | {len(seeds)} | " + " | ".join(cells) + f" | {holm_p} | {equivalent} | {length} | "
                     f"{len(events)} ({sum(e.ends_collapsed for e in events.values())}) |")
    return lines


POSITION_KEYS = {"opening": "opening sentence's sentiment", "first_third": "gold, first third",
                 "last_third": "gold, last third"}
LENGTH_KEYS = {"sentences": "sentences", "gold": "gold, whole response", "gold_first3": "gold, first 3 sentences",
               "gold_first10": "gold, first 10 sentences"}
REPORT_SAMPLE_SEED = 4321
"""The positions sampling seed every policy shares (:data:`evaluation.study_positions.SEED`); lines of other
sampling seeds measure the evaluation's own sampling noise."""


FRESH = " (fresh seeds)"


def position_groups(records: Sequence[dict], fresh_seeds: Sequence[int] = ()) -> Dict[str, List[dict]]:
    """``positions.jsonl`` lines of the shared sampling seed, per policy, in the arms' order; the runs of
    ``fresh_seeds`` (the confirmation, made on another machine) apart from the exploration's, as ``ARM (fresh
    seeds)``."""
    arms: Dict[str, List[dict]] = {}
    for record in records:
        if record.get("sample_seed", REPORT_SAMPLE_SEED) in (REPORT_SAMPLE_SEED, None):
            arms.setdefault(record["arm"] + (FRESH if record["seed"] in fresh_seeds else ""), []).append(record)
    order = ["chosen", "sft", *ARMS, *(arm + FRESH for arm in ARMS)]
    return {arm: arms[arm] for arm in order if arm in arms}


def position_cell(rows: Sequence[dict], key: str, digits: int = 3) -> str:
    values = [r[key] for r in rows if key in r]
    if not values:
        return "—"
    return mean_estimate(values).text(digits) if len(values) > 1 else f"{values[0]:.{digits}f}"


def position_lines(records: Sequence[dict], fresh_seeds: Sequence[int] = (), summaries: Sequence[dict] = ()
                   ) -> List[str]:
    """Tables of ``positions.jsonl`` (:mod:`evaluation.study_positions`): per arm, where the response changed, and
    its gold score whole and on its first sentences (length-controlled); the evaluation's sampling noise where
    several sampling seeds were drawn."""
    arms = position_groups(records, fresh_seeds)
    lines = ["#### Where the long responses changed (`python -m evaluation.study_positions`)", "",
             "Final actors, one sample per held-out prompt (128, T = 0.8, the same noise for every policy); the "
             "opening sentence is the early decision (100+ tokens before the reward). Seed mean [t CI]; *chosen*: the "
             "held-out chosen responses themselves.",
             "", "| policy | runs | " + " | ".join(POSITION_KEYS.values()) + " |",
             "|---|---|" + "---|" * len(POSITION_KEYS)]
    for arm, rows in arms.items():
        if arm != "chosen":
            lines.append(f"| {arm} | {len(rows) if arm != 'sft' else '—'} | "
                         + " | ".join(position_cell(rows, key) for key in POSITION_KEYS) + " |")
    measured = {arm: [r for r in rows if "gold" in r] for arm, rows in arms.items()}
    measured = {arm: rows for arm, rows in measured.items() if rows}
    if measured:
        lines += ["", "#### Gold with and without length's share", "",
                  "The gold score is the share of sentiment words (positive − negative over all words), and this "
                  "task's opening sentences carry more of them than the rest, so the same policy scores higher on "
                  "shorter responses. Beside each final actor's whole-response gold, the gold of its first 3 and first "
                  "10 sentences compares policies on the same number of sentences. Same samples as above; only the "
                  "actors measured on this machine (the others' lines predate these columns).", "",
                  "| policy | runs | " + " | ".join(LENGTH_KEYS.values()) + " |", "|---|---|" + "---|" * len(LENGTH_KEYS)]
        for arm, rows in measured.items():
            lines.append(f"| {arm} | {len(rows) if arm not in ('sft', 'chosen') else '—'} | "
                         + " | ".join(position_cell(rows, key, 1 if key == "sentences" else 3) for key in LENGTH_KEYS)
                         + " |")
    noise = sampling_noise(records)
    if noise:
        lines += ["", "#### The evaluation's own sampling noise", "",
                  "Final actors drawn again with other sampling seeds (same 128 prompts): the standard deviation of "
                  "their whole-response gold across sampling seeds (mean over the actors) against its standard "
                  "deviation across PPO seeds (one sampling seed).", "",
                  "| policy | actors | sampling seeds | SD across sampling seeds | SD across PPO seeds |",
                  "|---|---|---|---|---|"]
        for arm, (actors, draws, within, between) in noise.items():
            lines.append(f"| {arm} | {actors} | {draws} | {within:.4f} | {between:.4f} |")
    by_draw = sampling_seed_comparison(records)
    if by_draw:
        lines += ["", sampling_seed_text(by_draw, positions_against_runs(records, summaries))]
    return lines + [""]


def positions_against_runs(records: Sequence[dict], summaries: Sequence[dict], key: str = "gold"
                           ) -> Optional[Tuple[int, float, float]]:
    """The positions' draw at :data:`REPORT_SAMPLE_SEED` against the study's own evaluation of the same final actor
    (``runs.jsonl``'s final gold, long task): (actors both measured, SD and mean of positions − runs); None without
    two such actors."""
    finals = {(s["arm"], s["seed"]): s[key][-1] for s in summaries if s["task"] == "long"}
    offsets = [r[key] - finals[r["arm"], r["seed"]] for r in records
               if r.get("sample_seed") == REPORT_SAMPLE_SEED and key in r and (r["arm"], r["seed"]) in finals]
    return (len(offsets), statistics.stdev(offsets), statistics.fmean(offsets)) if len(offsets) > 1 else None


@dataclass(frozen=True)
class SamplingSeedComparison:
    """The pre-registered pair (``method`` − ``baseline``, whole-response gold of the final actors, paired by PPO
    seed) under each sampling seed both were drawn with, and on each actor's mean over those draws (an interval
    over PPO seeds that averages the evaluation sample's noise)."""

    baseline: str
    method: str
    per_sample_seed: Dict[int, Paired]
    averaged: Paired


def sampling_seed_comparison(records: Sequence[dict], key: str = "gold") -> Optional[SamplingSeedComparison]:
    """On the PPO seeds whose actors of both arms of the first confirmation tier were drawn more than once, under
    the sampling seeds all of them share; None unless two PPO seeds and two sampling seeds are left."""
    baseline, method = CONFIRMATION_TIERS["long"][0]
    draws: Dict[Tuple[str, int], Dict[int, float]] = {}
    for r in records:
        if r["arm"] in (baseline, method) and key in r and r.get("sample_seed") is not None:
            draws.setdefault((r["arm"], r["seed"]), {})[r["sample_seed"]] = r[key]
    redrawn = {key for key, found in draws.items() if len(found) > 1}
    seeds = sorted({s for a, s in redrawn if a == baseline} & {s for a, s in redrawn if a == method})
    sample_seeds = sorted(set.intersection(*(set(draws[a, s]) for s in seeds for a in (baseline, method)))) \
        if seeds else []
    if len(seeds) < 2 or len(sample_seeds) < 2:
        return None

    def values(arm, sample_seed=None):
        return [draws[arm, s][sample_seed] if sample_seed is not None
                else statistics.fmean(draws[arm, s][d] for d in sample_seeds) for s in seeds]

    return SamplingSeedComparison(baseline, method,
                                  {d: paired_difference(values(baseline, d), values(method, d)) for d in sample_seeds},
                                  paired_difference(values(baseline), values(method)))


def sampling_seed_text(found: SamplingSeedComparison, offset: Optional[Tuple[int, float, float]] = None) -> str:
    per_draw = "; ".join(f"sampling seed {d}: {p.diff.mean:+.4f} ({p.ahead}/{p.diff.n})"
                         for d, p in found.per_sample_seed.items())
    text = (f"{found.method} − {found.baseline}, final actors' whole-response gold paired by PPO seed, under each "
            f"sampling seed: {per_draw}; each actor averaged over the {len(found.per_sample_seed)} draws: "
            f"{found.averaged.diff.text(4)} ({found.averaged.ahead}/{found.averaged.diff.n}).")
    if offset:
        actors, sd, mean = offset
        text += (f" Sampling seed {REPORT_SAMPLE_SEED} here is the positions script's draw, not the study's own "
                 f"evaluation (`--eval_seed {REPORT_SAMPLE_SEED}` inside training): over the {actors} final actors "
                 f"both measured, its gold minus runs.jsonl's final gold has SD {sd:.4f} (mean {mean:+.4f}), so these "
                 "draws are three further samples beside the evaluation's, and the evaluation's own draw is a fourth "
                 "whose noise they estimate but do not remove.")
    return text


def sampling_noise(records: Sequence[dict], key: str = "gold") -> Dict[str, Tuple[int, int, float, float]]:
    """Per arm with actors drawn at several sampling seeds: (actors, sampling seeds, mean over actors of the SD of
    ``key`` across sampling seeds, SD of ``key`` across actors at the shared seed)."""
    draws: Dict[Tuple[str, int], Dict[int, float]] = {}
    for r in records:
        if key in r and r.get("sample_seed") is not None:
            draws.setdefault((r["arm"], r["seed"]), {})[r["sample_seed"]] = r[key]
    found = {}
    for arm in dict.fromkeys(a for a, _ in draws):
        actors = {seed: d for (a, seed), d in draws.items() if a == arm and len(d) > 1}
        if not actors or arm == "sft":
            continue
        within = statistics.fmean(statistics.stdev(d.values()) for d in actors.values())
        shared = [d[REPORT_SAMPLE_SEED] for d in actors.values() if REPORT_SAMPLE_SEED in d]
        between = statistics.stdev(shared) if len(shared) > 1 else math.nan
        found[arm] = (len(actors), min(len(d) for d in actors.values()), within, between)
    return found


def merge_runs(committed: Sequence[dict], fresh: Sequence[dict]) -> List[dict]:
    """The committed summaries with the freshly collected ones added or put in their place (same task, arm and
    seed), sorted by task, arm and seed: runs made elsewhere are kept, runs made here win."""
    merged = {(s["task"], s["arm"], s["seed"]): s for s in committed}
    merged.update({(s["task"], s["arm"], s["seed"]): s for s in fresh})
    return [merged[key] for key in sorted(merged)]


def merge_meta(committed: Optional[dict], fresh: dict) -> dict:
    """The runner's starts of both, without repeats, in order; the committed notes (history, machines) kept."""
    starts = list((committed or {}).get("starts", []))
    return {**(committed or {}), "starts": starts + [start for start in fresh.get("starts", []) if start not in starts]}


def write_report(out: Path, report_dir: Path) -> None:
    """Collect the finished runs under ``out`` into ``report_dir/runs.jsonl`` (beside the runs committed there
    that ``out`` does not hold: made on another machine) and the runner's starts into ``study_meta.json``, then
    render the report from them."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    runs_path, meta_path = report_dir / "runs.jsonl", report_dir / "study_meta.json"
    committed = [json.loads(line) for line in runs_path.read_text().splitlines() if line.strip()] \
        if runs_path.is_file() else []
    summaries = merge_runs(committed, collect(out))
    runs_path.write_text("".join(json.dumps(s) + "\n" for s in summaries))
    meta = Path(out) / "study_meta.json"
    if meta.is_file():  # the runs' folder is named OUT, as in study.sh, not by where it was on this machine
        fresh = json.loads(meta.read_text().replace(str(Path(out).resolve()), "OUT").replace(str(out), "OUT"))
        old = json.loads(meta_path.read_text()) if meta_path.is_file() else None
        meta_path.write_text(json.dumps(merge_meta(old, fresh), indent=1) + "\n")
    render(summaries, report_dir)


def render(summaries: Sequence[dict], report_dir: Path) -> None:
    from evaluation.study_plots import plot_ablations, plot_main, plot_sweeps

    meta_path = Path(report_dir) / "study_meta.json"
    lines = report_lines(summaries, json.loads(meta_path.read_text()) if meta_path.is_file() else None)
    positions = Path(report_dir) / "positions.jsonl"
    if positions.is_file():
        lines += position_lines([json.loads(line) for line in positions.read_text().splitlines() if line.strip()],
                                seed_split(by_arm(summaries, "long"))[1], summaries)
    if plot_main(summaries, report_dir / "main.png"):
        lines += ["![core arms](main.png)", ""]
    if plot_sweeps(summaries, report_dir / "sweeps.png"):
        lines += ["![token PPO's λ and MA-PPO's n](sweeps.png)", ""]
    for task in ("long", "short"):
        if plot_ablations(summaries, report_dir / f"ablations_{task}.png", task):
            lines += [f"![{task}-task ablations](ablations_{task}.png)", ""]
    lines += ["## The README's tables", "", *readme_table(summaries), ""]
    confirmation = confirmation_table(summaries)
    if confirmation:
        lines += [*confirmation, ""]
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
