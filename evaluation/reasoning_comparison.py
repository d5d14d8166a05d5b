"""The pre-registered reasoning comparison (``docs/study/plans/reasoning.md``, amendment 3): its analysis and its
figure, from the runs file ``docs/study/reasoning-amendment-3.jsonl`` (the first task version's runs:
``docs/study/reasoning.jsonl``), one record per run, failed runs included.

    python -m evaluation.reasoning_comparison docs/study/reasoning-amendment-3.jsonl --figure docs/study/reasoning.png

The analysis is the plan's, with the study's statistics (:mod:`evaluation.study.stats`): per contrast (method arm
against its baseline, paired by PPO seed on the same SFT model) the paired differences of the primary metric, held-out
accuracy at the last step; Holm's correction over the plan's one family of three contrasts, applied to the two-sided
t tests and, separately, to the equivalence tests (TOST, margin :data:`MARGIN`). The verdict of a contrast: *better*
or *worse* when its Holm-adjusted t test rejects at α = 0.05 (by the sign of the mean difference), *equivalent* when
its Holm-adjusted TOST does, else *not decided*. A failed run (the plan's definition: the run did not finish, or its
last evaluation is missing) removes its seed from every contrast it belongs to, and is counted.
"""
from __future__ import annotations

import json
import statistics
from typing import Dict, List, Mapping, Sequence

from evaluation.study.stats import ALPHA, adjust_families

MARGIN = 0.05
"""The equivalence margin on held-out accuracy (absolute), fixed in the plan before any run."""
CONTRASTS = {"ma-grpo-step": "grpo", "ma-grpo-fixed5": "grpo", "ma-ppo-step": "ppo"}
"""Method arm -> its baseline arm: the plan's family of three contrasts."""
FAMILY = "reasoning"
ARMS = ("grpo", "ma-grpo-step", "ma-grpo-fixed5", "ppo", "ma-ppo-step")
SEEDS = tuple(range(1, 9))
"""The plan's arms (in its run order) and PPO seeds: 40 runs."""
COMMAND = (".venv/bin/python -m evaluation.reasoning_comparison docs/study/reasoning-amendment-3.jsonl "
           "--figure docs/study/reasoning.png")


def read_runs(path: str) -> List[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def finals(runs: Sequence[dict]) -> Dict[str, Dict[int, float]]:
    """``{arm: {seed: accuracy at the last step}}`` of the runs that did not fail."""
    out: Dict[str, Dict[int, float]] = {}
    for run in runs:
        if not run.get("failed"):
            out.setdefault(run["arm"], {})[run["seed"]] = run["final_accuracy"]
    return out


def verdicts(runs: Sequence[dict], margin: float = MARGIN) -> Dict[str, dict]:
    """Each contrast's paired mean difference, Holm-adjusted p values and verdict (module docstring)."""
    final = finals(runs)
    tests = {}
    for method, baseline in CONTRASTS.items():
        seeds = sorted(set(final.get(method, {})) & set(final.get(baseline, {})))
        if len(seeds) >= 2:
            tests[method] = ([final[method][s] - final[baseline][s] for s in seeds], margin)
    adjusted = adjust_families({FAMILY: tests})
    out = {}
    for method, test in adjusted.items():
        diffs = tests[method][0]
        if test.p_holm < ALPHA:
            verdict = "better" if test.equivalence.mean > 0 else "worse"
        else:
            verdict = "equivalent" if test.equivalence.equivalent else "not decided"
        out[method] = {"baseline": CONTRASTS[method], "seeds": len(diffs), "mean_difference": test.equivalence.mean,
                       "p_holm": test.p_holm, "tost_p_holm": test.equivalence.p, "verdict": verdict}
    return out


def not_made(runs: Sequence[dict]) -> List[str]:
    """``arm seed`` of every planned run without a record."""
    recorded = {(run["arm"], run["seed"]) for run in runs}
    return [f"{arm} {seed}" for seed in SEEDS for arm in ARMS if (arm, seed) not in recorded]


def verdict_lines(runs: Sequence[dict]) -> List[str]:
    """The page's account of the comparison: how many runs (failed, not made: a partial set says so) and per
    contrast its pairs, mean paired difference, Holm-adjusted p values and verdict (:func:`verdicts`)."""
    result, missing = verdicts(runs), not_made(runs)
    failed = sum(bool(run.get("failed")) for run in runs)
    head = f"{len(runs)} of {len(ARMS) * len(SEEDS)} planned runs recorded, {failed} failed"
    head += f"; **partial**, not made: {', '.join(missing)}." if missing else "."
    lines = [head, "", "| contrast | complete pairs | mean difference (accuracy) | Holm p, t test | "
             f"Holm p, TOST ±{MARGIN} | verdict |", "|---|---|---|---|---|---|"]
    for method, baseline in CONTRASTS.items():
        r = result.get(method)
        lines.append(f"| {method} − {baseline} | " + (
            f"{r['seeds']} | {r['mean_difference']:+.3f} | {r['p_holm']:.3f} | {r['tost_p_holm']:.3f} | "
            f"**{r['verdict']}** |" if r else "fewer than 2 | – | – | – | **not decided** |"))
    return lines


def readme_line(runs: Sequence[dict]) -> str:
    """The README's one line answering reviewer QYzk, from the same verdicts (italic, not bold: the study section's
    bold bullets are the study generator's)."""
    result = verdicts(runs)
    parts = [f"{method} − {baseline} {result[method]['mean_difference']:+.3f} ({result[method]['verdict']})"
             if method in result else f"{method} − {baseline} not decided" for method, baseline in CONTRASTS.items()]
    scope = f" (partial: {len(runs)} of {len(ARMS) * len(SEEDS)} runs)" if not_made(runs) else ""
    arm_curves = curves(runs)
    start = statistics.mean(curve[0][1] for curve in arm_curves.values())
    last = [curve[-1][1] for curve in arm_curves.values()]
    iterations = max(curve[-1][0] for curve in arm_curves.values())
    fell = ": it fell in every arm, so these verdicts compare arms that all lost accuracy" if max(last) < start else ""
    return ("- *Would macro actions hurt math reasoning?* (reviewer QYzk) On the embedded arithmetic task with the "
            f"answer verifier as reward, {len(SEEDS)} PPO seeds per arm{scope}, held-out accuracy at the last step: "
            + "; ".join(parts) + f" (margin ±{MARGIN}; exploratory by the pre-registration check). At this budget "
            f"({iterations} iterations) accuracy went from {start:.3f} at step 0 to {min(last):.3f}-{max(last):.3f} at the last "
            f"(arm means){fell} "
            f"([reasoning](docs/reasoning.md), `{COMMAND}`).")


def curves(runs: Sequence[dict]) -> Mapping[str, List[List[float]]]:
    """``{arm: [[step, mean accuracy over its finished seeds], ...]}`` for the figure."""
    by_arm: Dict[str, Dict[int, List[float]]] = {}
    for run in runs:
        if not run.get("failed"):
            for step, accuracy in run["accuracy"]:
                by_arm.setdefault(run["arm"], {}).setdefault(step, []).append(accuracy)
    return {arm: [[step, sum(v) / len(v)] for step, v in sorted(points.items())] for arm, points in by_arm.items()}


def plot(runs: Sequence[dict], path: str, machine: str, commit: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for arm, points in sorted(curves(runs).items()):
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=arm)
    axis.set_xlabel("PPO iteration")
    axis.set_ylabel("held-out accuracy (greedy)")
    axis.set_title("arithmetic: accuracy against step, mean over finished seeds", fontsize=9)
    axis.legend(fontsize=8)
    figure.text(0.01, 0.01, f"{COMMAND} (runs at {commit})\n{machine}", fontsize=5)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def run_record(arm: str, seed: int, run_dir: str, started_at: str, wall_s: float, cpu_s: float) -> dict:
    """The runs file's record of one finished or failed run (the plan's fields): held-out accuracy (``eval/score``,
    the mean 0/1 verdict with the format weight 0) at every evaluation and at the last step; ``failed`` when the run
    did not finish or has no evaluation."""
    import os

    from dschat.core.machine import machine_line
    from dschat.training.run_record import git_commit, run_finished

    path = os.path.join(run_dir, "metrics.jsonl")
    records = read_runs(path) if os.path.exists(path) else []
    accuracy = [[r["step"], r["eval/score"]] for r in records if "eval/score" in r]
    failed = not run_finished(run_dir) or not accuracy
    return {"arm": arm, "seed": seed, "started_at": started_at, "commit": (git_commit() or {}).get("commit"),
            "machine": machine_line(), "load": os.getloadavg()[0], "wall_s": wall_s, "cpu_s": cpu_s,
            "accuracy": accuracy, "final_step": accuracy[-1][0] if accuracy else None,
            "final_accuracy": accuracy[-1][1] if accuracy else None, "failed": failed}


def main(argv=None) -> None:
    from dschat.core.entrypoint import ArgumentParser

    parser = ArgumentParser(description=__doc__)
    parser.add_argument("runs", help="the comparison's JSONL runs file")
    parser.add_argument("--figure", default=None, help="write the accuracy-against-step figure here (PNG)")
    parser.add_argument("--markdown", action="store_true", help="print the page's verdict table and README line")
    parser.add_argument("--record", nargs=6, default=None, metavar=("ARM", "SEED", "RUN_DIR", "STARTED_AT", "WALL_S",
                                                                     "CPU_S"),
                        help="append the record of one run to the runs file instead of analysing it")
    args = parser.parse_args(argv)
    if args.record:
        arm, seed, run_dir, started_at, wall_s, cpu_s = args.record
        with open(args.runs, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(run_record(arm, int(seed), run_dir, started_at, float(wall_s), float(cpu_s)))
                         + "\n")
        return
    runs = read_runs(args.runs)
    if args.markdown:
        print("\n".join(verdict_lines(runs) + ["", readme_line(runs)]))
    else:
        print(json.dumps({"runs": len(runs), "failed": sum(bool(r.get("failed")) for r in runs),
                          "not_made": not_made(runs), "verdicts": verdicts(runs)}, indent=1))
    if args.figure:
        plot(runs, args.figure, runs[0].get("machine", "") if runs else "",
             ",".join(sorted({str(r.get("commit"))[:7] for r in runs})))


if __name__ == "__main__":
    from dschat.core.entrypoint import run_cli

    run_cli(main)
