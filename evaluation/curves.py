"""Training curves from ``metrics.jsonl``: test RM score vs PPO step with the parity speed-up (paper Fig. 2, 13,
15, Fig. 5/6 left) and the L2 norms of advantages and Q-values (Fig. 11).

    python -m evaluation.curves --run ppo=outputs/demo/ppo --run mappo=outputs/demo/mappo --baseline ppo \\
        --out fig2.png --norms_out fig11.png

A ``--run NAME=DIR`` may be repeated with the same NAME for several seeds: the curve is then the mean over
runs and the shaded band one standard deviation across runs (as in Fig. 2). The parity speed-up is the paper's
§4.2 reading of Fig. 2 ("Gemma-2B trained with 1.7k MA-PPO updates reaches similar testing RM scores obtained
by vanilla PPO trained with 3.7k steps"): the step at which the baseline first reaches its own final test score,
divided by the step at which the method first reaches that score.
"""
from __future__ import annotations

import math
import statistics
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from dschat.training.run_record import run_finished
from evaluation.training_summary import read_metrics
from dschat.core.entrypoint import ArgumentParser

EVAL_SCORE = "eval/score"
TRAIN_SCORE = "objective/score"
ADVANTAGE_L2 = "macro/advantage_l2"
RETURN_L2 = "macro/return_l2"


@dataclass(frozen=True)
class Series:
    """A metric over training steps (sorted, one value per step)."""

    steps: Tuple[float, ...]
    values: Tuple[float, ...]

    def __len__(self) -> int:
        return len(self.steps)


def latest_run(records: Sequence[Mapping]) -> List[Mapping]:
    """The records of the last training run in a ``metrics.jsonl`` (the logger appends, so a run restarted from
    scratch in the same directory follows the previous one; it starts again with a step-0 evaluation)."""
    starts = [i for i, record in enumerate(records) if record.get("step") == 0]
    return list(records[starts[-1]:]) if starts else list(records)


def metric_series(records: Sequence[Mapping], key: str) -> Series:
    """``key`` over steps; when a step is logged twice (a resumed run repeats steps) the later value wins."""
    by_step: Dict[float, float] = {}
    for record in records:
        if key in record and record[key] is not None and math.isfinite(record[key]):
            by_step[record["step"]] = float(record[key])
    steps = tuple(sorted(by_step))
    return Series(steps, tuple(by_step[s] for s in steps))


def ema(values: Sequence[float], weight: float = 0.6) -> Tuple[float, ...]:
    """TensorBoard-style exponential moving average (``weight`` on the running value), bias-corrected so the
    first point is the first value."""
    smoothed, running, norm = [], 0.0, 0.0
    for value in values:
        running = weight * running + (1 - weight) * value
        norm = weight * norm + (1 - weight)
        smoothed.append(running / norm)
    return tuple(smoothed)


def mean_over_runs(runs: Sequence[Series]) -> Tuple[Series, Optional[Tuple[float, ...]]]:
    """Mean curve over the steps every run logged, and the across-run standard deviation (None for one run)."""
    if not runs:
        raise ValueError("no runs to average")
    common = sorted(set(runs[0].steps).intersection(*(r.steps for r in runs[1:])))
    columns = [[dict(zip(r.steps, r.values))[s] for r in runs] for s in common]
    mean = Series(tuple(common), tuple(statistics.fmean(c) for c in columns))
    std = tuple(statistics.pstdev(c) for c in columns) if len(runs) > 1 else None
    return mean, std


def first_crossing_step(series: Series, target: float) -> Optional[float]:
    """The first step at which the curve reaches ``target``, linearly interpolated between the two evaluations
    around the crossing; None if it never does."""
    for i, (step, value) in enumerate(zip(series.steps, series.values)):
        if value >= target:
            if i == 0:
                return float(step)
            prev_step, prev_value = series.steps[i - 1], series.values[i - 1]
            return prev_step + (target - prev_value) / (value - prev_value) * (step - prev_step)
    return None


@dataclass(frozen=True)
class Parity:
    """Fig. 2's parity reading: ``target`` is the baseline's final test score; ``baseline_step`` /
    ``method_step`` the first steps at which each curve reaches it; ``speedup`` their ratio (None when the
    method never reaches the target or reaches it at step 0)."""

    target: float
    baseline_step: float
    method_step: Optional[float]
    speedup: Optional[float]


def parity_speedup(baseline: Series, method: Series) -> Parity:
    """How many times fewer steps ``method`` needs to reach the baseline's final score (paper §4.2: MA-PPO
    reaches parity with vanilla PPO 1.7-2x faster; 1.7k vs 3.7k steps for Gemma-2B on TL;DR)."""
    if not len(baseline) or not len(method):
        raise ValueError("parity needs at least one evaluation in each run")
    target = baseline.values[-1]
    baseline_step = first_crossing_step(baseline, target)
    method_step = first_crossing_step(method, target)
    speedup = baseline_step / method_step if method_step else None
    return Parity(target, baseline_step, method_step, speedup)


@dataclass(frozen=True)
class MethodCurves:
    """What Fig. 2 / 11 draw for one method: the test score (mean over runs, across-run std), the smoothed
    training reward, and the advantage / Q-value L2 norms; ``unfinished`` lists the runs still running or stopped
    (their last point is not a final score)."""

    name: str
    runs: int
    eval_score: Series
    eval_score_std: Optional[Tuple[float, ...]]
    train_score: Series
    advantage_l2: Series
    return_l2: Series
    unfinished: Tuple[str, ...] = ()

    @property
    def last_label(self) -> str:
        """What the last evaluation is: the final test score, or only the latest of an unfinished run."""
        return "latest test score (unfinished run)" if self.unfinished else "final test score"


def method_curves(name: str, run_dirs: Sequence[str], smoothing: float = 0.6) -> MethodCurves:
    records = [latest_run(read_metrics(d)) for d in run_dirs]
    eval_score, eval_std = mean_over_runs([metric_series(r, EVAL_SCORE) for r in records])
    if not len(eval_score):
        raise ValueError(f"{', '.join(run_dirs)}: no '{EVAL_SCORE}' logged at common steps")

    def smoothed(key: str) -> Series:
        mean, _ = mean_over_runs([metric_series(r, key) for r in records])
        return Series(mean.steps, ema(mean.values, smoothing))

    return MethodCurves(name, len(run_dirs), eval_score, eval_std, smoothed(TRAIN_SCORE), smoothed(ADVANTAGE_L2),
                        smoothed(RETURN_L2), tuple(d for d in run_dirs if not run_finished(d)))


def group_runs(specs: Sequence[str]) -> "OrderedDict[str, List[str]]":
    """``NAME=DIR`` arguments → name → run directories, in first-seen order."""
    groups: "OrderedDict[str, List[str]]" = OrderedDict()
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--run {spec!r}: expected NAME=DIR")
        groups.setdefault(name, []).append(path)
    return groups


def seeds_note(method: str, method_runs: int, baseline: str, baseline_runs: int) -> str:
    """How many runs (seeds) a comparison rests on: ``n = 3 mappo, 3 ppo``, and that one seed has no spread."""
    note = f"n = {method_runs} {method}, {baseline_runs} {baseline} (seeds)"
    return note + ("; one seed: no spread, no error bar" if min(method_runs, baseline_runs) == 1 else "")


def parity_line(parity: Parity, method: str, baseline: str, method_runs: int, baseline_runs: int) -> str:
    """The parity verdict of ``method`` against ``baseline`` with the number of runs (seeds) behind each."""
    seeds = seeds_note(method, method_runs, baseline, baseline_runs)
    if parity.speedup is None:
        reached = "never reaches" if parity.method_step is None else "starts at or above"
        return f"parity: {method} {reached} {baseline}'s final score {parity.target:.3f} [{seeds}]"
    return (f"parity: {method} reaches {baseline}'s final score {parity.target:.3f} at step "
            f"{parity.method_step:.0f}, {baseline} at step {parity.baseline_step:.0f} -> "
            f"{parity.speedup:.2f}x faster (paper: 1.7-2x) [{seeds}]")


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=DIR",
                        help="a training output directory (repeat; the same NAME again = another seed)")
    parser.add_argument("--baseline", default=None, help="NAME the parity speed-up is measured against "
                                                        "(default: the first --run)")
    parser.add_argument("--smoothing", type=float, default=0.6, help="EMA weight for training curves")
    parser.add_argument("--out", default=None, help="Fig. 2-style PNG of test RM score vs step")
    parser.add_argument("--norms_out", default=None, help="Fig. 11-style PNG of advantage / Q-value L2 norms")
    parser.add_argument("--title", default="Test RM score during PPO training (cf. paper Fig. 2)")
    args = parser.parse_args(argv)
    try:
        groups = group_runs(args.run)
        baseline = args.baseline or next(iter(groups))
        if baseline not in groups:
            raise ValueError(f"--baseline {baseline}: not one of the --run names ({', '.join(groups)})")
        curves = [method_curves(name, dirs, args.smoothing) for name, dirs in groups.items()]
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    by_name = {c.name: c for c in curves}
    parities = {c.name: parity_speedup(by_name[baseline].eval_score, c.eval_score)
                for c in curves if c.name != baseline}
    for c in curves:
        for run_dir in c.unfinished:
            print(f"warning: {run_dir}: unfinished run (no final model yet): its last point, step "
                  f"{c.eval_score.steps[-1]:.0f}, is not a final score", file=sys.stderr)
        print(f"{c.name} ({c.runs} run{'s' * (c.runs > 1)}): test RM score {c.eval_score.values[0]:.3f} "
              f"(step {c.eval_score.steps[0]:.0f}) -> {c.eval_score.values[-1]:.3f} (step {c.eval_score.steps[-1]:.0f}"
              f"{', unfinished' if c.unfinished else ''})")
    for name, parity in parities.items():
        line = parity_line(parity, name, baseline, by_name[name].runs, by_name[baseline].runs)
        print(line + (f" [{baseline} unfinished: against its latest score]" if by_name[baseline].unfinished else ""))
    if args.out or args.norms_out:
        from evaluation import plots

        if args.out:
            plots.plot_training_curves(curves, baseline, parities, args.out, args.title)
            print(f"wrote {args.out}")
        if args.norms_out:
            plots.plot_l2_norms(curves, args.norms_out)
            print(f"wrote {args.norms_out}")


if __name__ == "__main__":
    main()
