"""The pre-registered comparison ``multi-turn-macros`` (plan: docs/study/plans/multi-turn-macros.md): MA-PPO with one
macro per turn against token-level PPO on ``--env consistency``, 8 seeds per arm; its runs and its analysis.

``python -m evaluation.multi_turn_study run [--seeds ...]`` runs the missing (arm, seed) pairs one at a time, niced,
appending one record per run to docs/study/multi-turn-macros.jsonl (failed runs too); ``... analyse`` prints the
plan's primary analysis. Kept outside ``evaluation/study/`` (it only reuses its statistics).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from evaluation.study.stats import area_under_curve, paired_difference, paired_t_p

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "study" / "multi-turn-macros.jsonl"
ARMS = {"ppo": ("--termination", "fixed", "--ngram", "1"), "mappo-turn": ("--termination", "turn")}
BASELINE, METHOD = "ppo", "mappo-turn"
SEEDS = tuple(range(101, 109))
FLAGS = ("--env", "consistency", "--max_new_tokens", "2", "--max_turns", "2", "--max_episode_tokens", "48",
         "--num_train_epochs", "2", "--max_steps", "20", "--warmup_steps", "0", "--per_device_generation_batch_size",
         "16", "--per_device_train_batch_size", "16", "--actor_learning_rate", "1e-2", "--critic_learning_rate",
         "1e-2", "--kl_coef", "0", "--temperature", "1.0", "--eval_steps", "10", "--max_eval_samples", "32",
         "--eval_seed", "0", "--no_progress_bar", "--log_samples", "0")
"""Every arm's flags (the plan's); the arm adds its termination rule and the seed ``--seed``."""
EVAL_STEPS = (0, 10, 20)
"""The evaluations of a finished run."""


def run_one(arm: str, seed: int, out_root: Path) -> dict:
    """One run of ``arm`` with ``seed``, niced; its record (the eval curve, or ``failed`` with the exit status)."""
    from dschat.core.machine import machine_line

    out = out_root / f"{arm}-{seed}"
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    load, start, cpu = os.getloadavg()[0], time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    command = ["nice", "-n", "10", sys.executable, "training/step3_rlhf_finetuning/main.py", *FLAGS, *ARMS[arm],
               "--seed", str(seed), "--output_dir", str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"arm": arm, "seed": seed, "started_at": started, "commit": commit, "machine": machine_line(),
              "wall_s": round(time.perf_counter() - start, 1),
              "cpu_s": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1),
              "load_at_start": round(load, 2), "load_at_end": round(os.getloadavg()[0], 2),
              "returncode": result.returncode}
    metrics = out / "metrics.jsonl"
    evals = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    curve = {str(r["step"]): r["eval/score"] for r in evals if "eval/score" in r}
    record.update(eval_score=curve, final_score=curve[max(curve, key=int)] if curve else None,
                  failed=result.returncode != 0 or sorted(map(int, curve)) != list(EVAL_STEPS))
    if record["failed"]:
        record["error"] = (result.stderr.strip().splitlines() or [""])[-1]
    return record


def analyse(records: list) -> dict:
    """The plan's primary analysis: per seed both arms finished, the area under the eval-score curve (its mean level
    over the 20 steps), the paired difference method - baseline with its t interval, and the two-sided paired t p;
    the secondary figure, the final eval score's paired difference, without a test."""
    done = {(r["arm"], r["seed"]): r for r in records if not r["failed"]}
    seeds = sorted(seed for seed in SEEDS if (BASELINE, seed) in done and (METHOD, seed) in done)

    def auc(arm: str, seed: int) -> float:
        curve = sorted((int(step), value) for step, value in done[(arm, seed)]["eval_score"].items())
        return area_under_curve([s for s, _ in curve], [v for _, v in curve])

    base, method = [auc(BASELINE, s) for s in seeds], [auc(METHOD, s) for s in seeds]
    paired = paired_difference(base, method)
    final = paired_difference(*([done[(arm, s)]["final_score"] for s in seeds] for arm in (BASELINE, METHOD)))
    return {"seeds": seeds, "failed": sum(r["failed"] for r in records), f"auc_{BASELINE}": base,
            f"auc_{METHOD}": method, "difference": paired.diff.text(), "ahead": paired.ahead,
            "p": paired_t_p([m - b for b, m in zip(base, method)]), "final_difference": final.diff.text()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("action", choices=("run", "analyse"))
    parser.add_argument("--seeds", type=int, nargs="*", default=list(SEEDS))
    parser.add_argument("--out_root", default="outputs/multi_turn_study")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in RECORDS.read_text().splitlines()] if RECORDS.exists() else []
    if args.action == "analyse":
        print(json.dumps(analyse(records), indent=1))
        return
    filed = {(r["arm"], r["seed"]) for r in records}
    for seed in args.seeds:
        for arm in ARMS:
            if (arm, seed) not in filed:
                record = run_one(arm, seed, Path(args.out_root))
                with RECORDS.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                print(json.dumps({k: record[k] for k in ("arm", "seed", "final_score", "failed", "wall_s")}),
                      flush=True)


if __name__ == "__main__":
    main()
