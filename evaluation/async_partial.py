"""The ``async-partial`` comparison (``docs/study/plans/async-partial.md``): on the study's long task, MA-PPO n = 5 at
λ = 1 with K = 1, with and without ``--partial_rollout``, paired by PPO seed; final gold, TOST within the study's
margin. Each run, finished or failed, is one record of ``docs/study/async-partial.jsonl``.

    python -m evaluation.async_partial run --out outputs/async --seeds 9 16 --jobs 2
    python -m evaluation.async_partial report
"""
from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Sequence

from dschat.core.entrypoint import ArgumentParser, run_cli
from evaluation.study.design import CONFIRMATION_FLAGS, EQUIVALENCE_MARGINS
from evaluation.study.runner import Run, code_version, ensure_models, is_finished, train_run
from evaluation.study.stats import ALPHA, COLLAPSE_FRACTION, paired_t_p, t_interval, tost

TASK, ALGORITHM = "long", "mappo-lam1"
ARMS = {"k1": ("--async_rollout", "1", "--rollout_is", "macro"),
        "k1-partial": ("--async_rollout", "1", "--rollout_is", "macro", "--partial_rollout",
                       "--partial_rollout_chunk", "16")}
RECORDS = Path(__file__).resolve().parent.parent / "docs" / "study" / "async-partial.jsonl"
TIMEOUT_MINUTES = 60


def record(arm: str, seed: int, started: str, commit: str, directory: Path, wall) -> dict:
    """One run's record: identity, start, the code's commit when it started, machine, and its gold at every
    evaluation — or why it failed."""
    from dschat.core.machine import machine_record
    from evaluation.study.summaries import run_summary

    base = {"arm": arm, "seed": seed, "started_at": started, "commit": commit,
            "machine": machine_record()}
    if wall is None or not is_finished(directory):
        return {**base, "failed": True, "reason": "step 3 failed or passed its time limit; see its log"}
    summary = run_summary(directory)
    if not summary["gold"] or summary["steps"][-1] != 48:
        return {**base, "failed": True, "reason": f"no final evaluation (evaluated at {summary['steps']})"}
    return {**base, "failed": False, "steps": summary["steps"], "gold": summary["gold"],
            "final_gold": summary["gold"][-1], "length": summary["length"], "wall_s": summary["wall_s"],
            "cpu_s": summary["cpu_s"]}


def train(out: Path, seeds: Sequence[int], jobs: int, model: str = "tiny-gemma") -> None:
    """Both arms of each seed, seed-major, ``jobs`` at a time; a record appended as each run ends."""
    sft, rm = ensure_models(TASK, Path(out), model)
    lock = threading.Lock()

    def one(item) -> None:
        seed, arm = item
        run = Run(TASK, ALGORITHM, seed, extra=(*CONFIRMATION_FLAGS, *ARMS[arm]))
        started, commit = datetime.now(timezone.utc).isoformat(timespec="seconds"), code_version()["commit"]
        wall = train_run(run, Path(out) / arm, sft, rm, timeout_minutes=TIMEOUT_MINUTES, attempts=1)
        line = json.dumps(record(arm, seed, started, commit, run.directory(Path(out) / arm), wall))
        with lock, open(RECORDS, "a") as handle:
            handle.write(line + "\n")

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, [(seed, arm) for seed in seeds for arm in ARMS]))


def paired_reading(diffs: Sequence[float]) -> Dict[str, object]:
    """The plan's reading of paired differences: mean, 95% t interval, t test and TOST within the gold margin."""
    margin = EQUIVALENCE_MARGINS["gold"]
    p, tost_p = paired_t_p(diffs), tost(diffs, margin).p
    return dict(mean=sum(diffs) / len(diffs), ci=t_interval(diffs), p=p, tost_p=tost_p,
                reading=(f"equivalent within ±{margin}" if tost_p < ALPHA else "a difference" if p < ALPHA
                         else "not decided"))


def analysis(records: Sequence[dict]) -> Dict[str, object]:
    """The plan's analysis: d = final gold (k1-partial) − (k1) over the seeds with both arms finished; and its
    sensitivity, the same without the seeds on which either run collapsed (final length below
    :data:`~evaluation.study.stats.COLLAPSE_FRACTION` of its step-0 length)."""
    final: Dict[str, Dict[int, dict]] = {arm: {} for arm in ARMS}
    for r in records:
        if not r["failed"]:
            final[r["arm"]][r["seed"]] = r
    seeds = sorted(set(final["k1"]) & set(final["k1-partial"]))
    diffs = [final["k1-partial"][s]["final_gold"] - final["k1"][s]["final_gold"] for s in seeds]
    collapsed = [s for s in seeds if any(final[arm][s]["length"][-1] < COLLAPSE_FRACTION * final[arm][s]["length"][0]
                                         for arm in ARMS)]
    result: Dict[str, object] = {"seeds": seeds, "diffs": diffs, "runs": len(records),
                                 "failed": sum(r["failed"] for r in records), "collapsed_seeds": collapsed}
    if len(diffs) >= 2:
        result.update(paired_reading(diffs))
    kept = [d for s, d in zip(seeds, diffs) if s not in collapsed]
    if collapsed and len(kept) >= 2:
        result["without_collapsed"] = paired_reading(kept)
    return result


def read_records(path: Path = RECORDS) -> List[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train the runs, appending their records")
    run.add_argument("--out", type=Path, default=Path("outputs/async"), help="where the runs go (default %(default)s)")
    run.add_argument("--seeds", type=int, nargs=2, default=(9, 16), help="first and last PPO seed (default 9 16)")
    run.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    sub.add_parser("report", help="print the plan's analysis of the records")
    args = parser.parse_args()
    if args.command == "run":
        train(args.out, range(args.seeds[0], args.seeds[1] + 1), args.jobs)
    else:
        print(json.dumps(analysis(read_records()), indent=1))


if __name__ == "__main__":
    run_cli(main)
