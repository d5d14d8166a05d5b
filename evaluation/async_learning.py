"""Does learning hold when rollouts run one policy version ahead (``--async_rollout 1``)?

On the study's long task (:mod:`evaluation.study.design`: its SFT and reward model, flags, evaluation seed and
confirmation schedule), token PPO and MA-PPO n = 5, both at λ = 1 (the study's planned
pair; exploratory by its pre-registration check), are trained
with K = 0 (the synchronous loop) and K = 1 (corrected per macro action, ``--rollout_is macro``) on the same PPO
seeds; each K = 1 run is paired with the K = 0 run of its seed. The final gold difference K1 − K0 is tested for
equivalence within the study's margin (±0.010, :data:`evaluation.study.design.EQUIVALENCE_MARGINS`) by TOST,
with its 95% t interval, per algorithm (Holm over the two). Gold against the trainer's wall-clock hours (the
cumulative ``timing/iteration`` up to each evaluation, on the machine and load the runs had) is plotted per K.

    python -m evaluation.async_learning run --out outputs/async --seeds 9 16 --jobs 2
    python -m evaluation.async_learning report --out outputs/async --report_dir docs/async
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from dschat.core.entrypoint import ArgumentParser, run_cli
from evaluation.study.design import CONFIRMATION_FLAGS, EQUIVALENCE_MARGINS
from evaluation.study.runner import Run, ensure_models, is_finished, train_run
from evaluation.study.stats import ALPHA, FAILED_RULE, failure, holm, paired_t_p, t_interval, tost

TASK = "long"
ARMS = ("ppo-lam1", "mappo-lam1")
AHEAD = {0: (), 1: ("--async_rollout", "1", "--rollout_is", "macro")}
"""K -> the flags a run adds to its arm's."""
RUNS_FILE = "runs.jsonl"


def plan(seeds: Sequence[int]) -> List[Tuple[int, Run]]:
    """``(K, run)`` for every arm, seed and K, seed-major (a pair finishes together)."""
    return [(ahead, Run(TASK, arm, seed, extra=(*CONFIRMATION_FLAGS, *flags)))
            for seed in seeds for arm in ARMS for ahead, flags in AHEAD.items()]


def run_dir(out: Path, ahead: int) -> Path:
    return Path(out) / f"K{ahead}"


MACHINE_FILE = "machine.json"
"""The machine that trained the runs under ``out`` (:func:`dschat.core.machine.machine_record`)."""


def train(out: Path, seeds: Sequence[int], jobs: int, model: str = "tiny-gemma") -> None:
    from dschat.core.machine import machine_record

    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / MACHINE_FILE).write_text(json.dumps(machine_record()) + "\n")
    sft, rm = ensure_models(TASK, out, model)
    todo = [(ahead, run) for ahead, run in plan(seeds) if not is_finished(run.directory(run_dir(out, ahead)))]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda item: train_run(item[1], run_dir(out, item[0]), sft, rm), todo))


def summarize(directory: Path, ahead: int, machine: dict) -> dict:
    """A finished run: its identity, K, machine, evaluations and the trainer's hours up to each of them."""
    from evaluation.study.summaries import run_summary

    summary = {**run_summary(directory), "async_rollout": ahead, "machine": machine}
    with open(directory / "metrics.jsonl") as handle:
        rows = [json.loads(line) for line in handle]
    seconds, hours = 0.0, {}
    for row in rows:
        seconds += row.get("timing/iteration", 0.0)
        hours[row["step"]] = seconds / 3600
    summary["hours"] = [round(hours.get(step, 0.0), 5) for step in summary["steps"]]
    return summary


def collect(out: Path, seeds: Sequence[int]) -> List[dict]:
    machine = json.loads((Path(out) / MACHINE_FILE).read_text())
    return [summarize(run.directory(run_dir(out, ahead)), ahead, machine) for ahead, run in plan(seeds)
            if is_finished(run.directory(run_dir(out, ahead)))]


def comparison(summaries: Sequence[dict], drop_failed: bool = False) -> Dict[str, dict]:
    """Per arm: the paired final-gold differences K1 − K0 by seed, their mean and 95% t interval, the paired t
    test and TOST within the study's gold margin, each Holm-adjusted over the arms (``p_all``/``tost_p_all``: over
    both arms of both tables). ``drop_failed``: without the seeds on which either run failed (the study's
    :func:`~evaluation.study.stats.failure`; a sensitivity chosen after the primary table: a collapsed run's gold is
    the gold of a few words)."""
    runs: Dict[Tuple[str, int], Dict[int, dict]] = {}
    for s in summaries:
        runs.setdefault((s["arm"], s["async_rollout"]), {})[s["seed"]] = s
    result = {}
    for arm in ARMS:
        k0, k1 = runs.get((arm, 0), {}), runs.get((arm, 1), {})
        seeds = sorted(seed for seed in set(k0) & set(k1)
                       if not (drop_failed and (failure(k0[seed]) or failure(k1[seed]))))
        if len(seeds) < 2:
            continue
        diffs = [k1[seed]["gold"][-1] - k0[seed]["gold"][-1] for seed in seeds]
        result[arm] = {"seeds": seeds, "diffs": diffs, "mean": sum(diffs) / len(diffs), "ci": t_interval(diffs),
                       "k0": sum(k0[s]["gold"][-1] for s in seeds) / len(seeds),
                       "k1": sum(k1[s]["gold"][-1] for s in seeds) / len(seeds),
                       "p": paired_t_p(diffs), "tost_p": tost(diffs, EQUIVALENCE_MARGINS["gold"]).p}
    for key in ("p", "tost_p"):
        adjusted = holm({arm: row[key] for arm, row in result.items()})
        for arm, row in result.items():
            row[f"{key}_holm"] = adjusted[arm]
    if drop_failed:  # the same tests Holm-adjusted over both tables' four (the family the sensitivity joins)
        primary = comparison(summaries)
        for key in ("p", "tost_p"):
            adjusted = holm({**{(arm, 0): row[key] for arm, row in primary.items()},
                             **{(arm, 1): row[key] for arm, row in result.items()}})
            for arm, row in result.items():
                row[f"{key}_all"] = adjusted[arm, 1]
    return result


def reading(row: dict) -> str:
    margin = EQUIVALENCE_MARGINS["gold"]
    if row["tost_p_holm"] < ALPHA:
        return f"equivalent within ±{margin}"
    if row["p_holm"] < ALPHA:
        return "K = 1 ahead" if row["mean"] > 0 else "K = 0 ahead"
    return f"not decided: no difference shown, and equivalence within ±{margin} not shown either"


def report_lines(summaries: Sequence[dict], study_reruns: Sequence[dict] = ()) -> List[str]:
    """The report: the primary comparison and its sensitivity without failed runs, the failed runs, the machine, and
    which K = 0 runs are, bit for bit, the study's machine reruns (``study_reruns``)."""
    machines = sorted({json.dumps(s.get("machine"), sort_keys=True) for s in summaries})
    lines = []
    for title, drop in (("Final gold, K = 1 against K = 0, paired by PPO seed", False),
                        ("Sensitivity, chosen after the table above: without the seeds on which either run failed",
                         True)):  # its reading: Holm over both tables' four tests
        lines += [f"{title} (Holm over the two arms):", "",
                  "| arm | seeds | final gold K = 0 | K = 1 | K1 − K0 [95% t CI] | t p (Holm) | TOST p (Holm) | reading |",
                  "|---|---|---|---|---|---|---|---|"]
        for arm, row in comparison(summaries, drop).items():
            low, high = row["ci"]
            shown = {**row, "p_holm": row["p_all"], "tost_p_holm": row["tost_p_all"]} if drop else row
            lines.append(f"| {arm} | {len(row['seeds'])} | {row['k0']:.4f} | {row['k1']:.4f} | {row['mean']:+.4f} "
                         f"[{low:+.4f}, {high:+.4f}] | {row['p']:.3f} ({row['p_holm']:.3f}) | {row['tost_p']:.3f} "
                         f"({row['tost_p_holm']:.3f}) | {reading(shown)} |")
        lines.append("")
        if drop:
            lines += ["Its reading: Holm over both tables' four tests (the family the sensitivity joins): " + "; ".join(
                f"{arm} t p {row['p_all']:.3f}, TOST p {row['tost_p_all']:.3f}"
                for arm, row in comparison(summaries, drop).items()) + ".", ""]
    ended = [f"{s['arm']} K = {s['async_rollout']} seed {s['seed']} ({failure(s)}; length {s['length'][0]:.0f} → "
             f"{s['length'][-1]:.0f}, gold {s['gold'][-1]:.3f})" for s in summaries if failure(s)]
    same = [s for s in summaries if any(all(s[m] == r[m] for m in ("rm", "gold", "length"))
                                        and (s["arm"], s["seed"]) == (r["arm"], r["seed"]) for r in study_reruns)]
    lines += [f"Failed ({FAILED_RULE}): {'; '.join(ended) or 'none'}.", ""]
    if same:
        lines += [f"{len(same)} of the K = 0 runs equal, bit for bit at every evaluation, the study's machine reruns of "
                  "the same arm and seed (`docs/study/machine_reruns.jsonl`): they are the same runs, not a second "
                  "sample.", ""]
    return lines + [f"Machine(s): {'; '.join(machines)}"]


def clocked(summaries: Sequence[dict], seconds: Dict[int, float]) -> List[dict]:
    """``summaries`` with ``hours`` replaced by step × the measured seconds per iteration of their K (a clock
    measured once on quiet cores, :mod:`scripts.benchmarks.bench_async`, instead of the runs' own, which shared
    their cores with each other); K without a clock keep their own."""
    return [{**s, "hours": [step * seconds[s["async_rollout"]] / 3600 for step in s["steps"]]}
            if s["async_rollout"] in seconds else s for s in summaries]


def plot(summaries: Sequence[dict], path: Path) -> None:
    """Mean gold against the trainer's hours per arm and K (each K's mean hours at each evaluation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(ARMS), figsize=(5 * len(ARMS), 3.6), sharey=True)
    for axis, arm in zip(axes, ARMS):
        for ahead in AHEAD:
            runs = [s for s in summaries if s["arm"] == arm and s["async_rollout"] == ahead]
            if not runs:
                continue
            count = min(len(s["gold"]) for s in runs)
            hours = [sum(s["hours"][i] for s in runs) / len(runs) for i in range(count)]
            gold = [sum(s["gold"][i] for s in runs) / len(runs) for i in range(count)]
            axis.plot(hours, gold, marker="o", label=f"K = {ahead} ({len(runs)} seeds)")
        axis.set_title(arm)
        axis.set_xlabel("trainer wall-clock hours")
        axis.legend()
    axes[0].set_ylabel("mean held-out gold")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "report"):
        command = sub.add_parser(name)
        command.add_argument("--out", type=Path, default=Path("outputs/async"),
                             help="runs' folder (default outputs/async)")
        command.add_argument("--seeds", type=int, nargs=2, default=(9, 16), metavar=("FIRST", "LAST"),
                             help="PPO seeds FIRST..LAST (default 9 16: the study's confirmation seeds)")
    sub.choices["run"].add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    sub.choices["report"].add_argument("--report_dir", type=Path, default=Path("docs/async"),
                                       help="where runs.jsonl, report.md and the figure go (default docs/async)")
    sub.choices["report"].add_argument("--seconds_per_iteration", nargs=2, type=float, default=None,
                                       metavar=("K0", "K1"), help="the figure's clock: seconds per iteration of K = 0 "
                                       "and K = 1 measured on quiet cores (bench_async.py); default: the runs' own")
    args = parser.parse_args(argv)
    seeds = range(args.seeds[0], args.seeds[1] + 1)
    if args.command == "run":
        train(args.out, seeds, args.jobs)
        return
    summaries = collect(args.out, seeds)
    if not summaries:
        raise FileNotFoundError(f"{args.out}: no finished run of {TASK}/{{{','.join(ARMS)}}} for seeds "
                                f"{args.seeds[0]}-{args.seeds[1]}")
    args.report_dir.mkdir(parents=True, exist_ok=True)
    with open(args.report_dir / RUNS_FILE, "w") as handle:
        handle.writelines(json.dumps(s) + "\n" for s in summaries)
    reruns = args.report_dir.parent / "study" / "machine_reruns.jsonl"
    lines = report_lines(summaries, [json.loads(line) for line in reruns.read_text().splitlines() if line.strip()]
                         if reruns.is_file() else [])
    (args.report_dir / "report.md").write_text("\n".join(lines) + "\n")
    clock = dict(enumerate(args.seconds_per_iteration)) if args.seconds_per_iteration else {}
    plot(clocked(summaries, clock), args.report_dir / "gold_vs_hours.png")
    print("\n".join(lines))


if __name__ == "__main__":
    run_cli(main)
