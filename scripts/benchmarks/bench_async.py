#!/usr/bin/env python
"""Steps per hour of step 3 with ``--async_rollout K`` against the synchronous loop, at equal hardware.

Variants, each a whole ``python -m dschat.cli.ppo`` run on the same flags, model, prompts and seed:

- ``sync-2t``: K = 0 with 2 intra-op threads (every phase gets both cores);
- ``sync-1t``: K = 0 with 1 thread (the phase split the async prediction starts from);
- ``async-K`` (K = 1, 2): the trainer with 1 thread and the producer process with 1 thread (the same 2 cores);
- ``async-1p``: ``async-1`` with ``--partial_rollout`` (chunks of ``--chunk`` tokens): where response lengths vary
  (a trained SFT on the long task), against ``async-1`` — steps per hour, the producer's idle time (its wait for
  the trainer) and the fraction of responses sampled by two versions.

Every response is ``new`` tokens long (an untrained model at temperature 1 rarely emits eos; the run's mean
response length is printed so that this can be checked), evaluation is off but for the first and last, and the
first ``--warmup`` iterations (the producer's start) are left out. Repetition r runs the variants in an order
rotated by r. Per variant: seconds per iteration (``timing/iteration``), steps per hour, and the split — the
trainer's busy time (iteration − wait for the rollout), the producer's busy time and each side's wait — as
median [min, max] over the repetitions (each repetition's figure the median of its iterations). Printed ratios
are paired within a repetition. The prediction: K = 1's iteration takes the longer of its two sides' busy
times, max(generate, rest) of ``sync-1t``, so its speed-up over ``sync-1t`` is (generate + rest) /
max(generate, rest); the printed error is measured / predicted − 1.

The comparison needs idle cores: with other jobs on the machine, contention, not the overlap, sets the figures. The
1-minute load average is printed before and after every run (``os.getloadavg()``) and summarized per shape; report
it with the figures.

    python scripts/benchmarks/bench_async.py --shapes 8x16 32x128 --steps 8 --repeats 3
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from repeats import rotated, spread  # noqa: E402

from dschat.core.entrypoint import ArgumentParser  # noqa: E402
from dschat.core.machine import machine_line  # noqa: E402

VARIANTS = {"sync-2t": (0, 2), "sync-1t": (0, 1), "async-1": (1, 1), "async-2": (2, 1), "async-1p": (1, 1)}
"""Variant -> (--async_rollout, the trainer's threads); the producer always has one thread."""
PARTIAL = ("async-1p",)
"""The variants run with ``--partial_rollout``."""


def run_variant(model: str, critic: str, prompts: int, new: int, steps: int, ahead: int, threads: int, out: str,
                extra: list) -> list:
    """The training rows of one run's ``metrics.jsonl``."""
    flags = ["--actor_model_name_or_path", model, "--critic_model_name_or_path", critic, "--output_dir", out,
             "--max_prompt_seq_len", "32", "--max_new_tokens", str(new), "--per_device_generation_batch_size",
             str(prompts), "--per_device_train_batch_size", str(min(prompts, 8)), "--max_steps", str(steps),
             "--max_eval_samples", "4", "--eval_steps", "0", "--warmup_steps", "0", "--temperature", "1.0",
             "--no_progress_bar", "--log_samples", "0", "--termination", "fixed", "--ngram", "5", "--seed", "1",
             "--async_rollout", str(ahead), "--rollout_threads", "1"]
    if ahead:
        flags += ["--rollout_is", "macro"]
    flags += extra
    env = {**os.environ, "MARLHF_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
           "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run([sys.executable, "-m", "dschat.cli.ppo", *flags], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"{ahead=} {threads=} failed:\n{result.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as handle:
        return [row for row in map(json.loads, handle) if "timing/iteration" in row]


def split(rows: list, warmup: int) -> dict:
    """Median per-iteration seconds of a run after ``warmup`` iterations: the iteration, the trainer's busy
    time, its wait for the rollout, the producer's busy time and its wait for the trainer; synchronous runs'
    generate and rest."""
    rows = rows[warmup:]

    def median(key):
        return statistics.median(row.get(key, 0.0) for row in rows)

    iteration, wait = median("timing/iteration"), median("timing/wait_for_rollout")
    return {"iteration": iteration, "trainer_busy": iteration - wait, "wait_for_rollout": wait,
            "producer_busy": median("timing/producer_busy"), "wait_for_trainer": median("timing/wait_for_trainer"),
            "generate": median("timing/generate"), "length": median("response/length"),
            "mixed": median("rollout/multi_version_responses")}


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-gemma", help="the actor (default tiny-gemma)")
    parser.add_argument("--critic", default=None, help="critic and reward model (default: --model)")
    parser.add_argument("--extra", default="", help="more step-3 flags for every variant, one string (e.g. "
                        "'--data_name synthetic-long --data_split 4,5,1')")
    parser.add_argument("--shapes", nargs="+", default=["8x16", "32x128"],
                        help="PROMPTSxNEW_TOKENS per iteration (default 8x16 32x128)")
    parser.add_argument("--steps", type=int, default=8, help="iterations per run (default 8)")
    parser.add_argument("--warmup", type=int, default=2, help="first iterations left out (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="rotated repetitions (default 3)")
    parser.add_argument("--variants", nargs="+", default=[v for v in VARIANTS if v not in PARTIAL],
                        choices=list(VARIANTS), help="default: all but the --partial_rollout ones")
    parser.add_argument("--chunk", type=int, default=16, help="async-1p's --partial_rollout_chunk (default 16)")
    args = parser.parse_args()
    print(machine_line())
    critic, extra = args.critic or args.model, args.extra.split()
    print(f"actor {args.model}, critic and reward model {critic}, extra flags {extra or 'none'}; "
          f"{args.steps} iterations per run (first {args.warmup} left out), "
          f"{args.repeats} rotated repetitions; trainer threads / producer threads per variant: "
          + ", ".join(f"{name} {threads}/{'1' if ahead else '-'}" for name, (ahead, threads) in VARIANTS.items()
                      if name in args.variants))
    for shape in args.shapes:
        prompts, new = map(int, shape.split("x"))
        measured, loads = {name: [] for name in args.variants}, []
        for repetition in range(args.repeats):
            for name in rotated(args.variants, repetition):
                ahead, threads = VARIANTS[name]
                flags = extra + (["--partial_rollout", "--partial_rollout_chunk", str(args.chunk)]
                                 if name in PARTIAL else [])
                before = os.getloadavg()[0]
                with tempfile.TemporaryDirectory(prefix="bench-async-") as out:
                    rows = run_variant(args.model, critic, prompts, new, args.steps, ahead, threads, out, flags)
                loads += [before, os.getloadavg()[0]]
                print(f"repetition {repetition} {name}: 1-minute load {before:.2f} before, {loads[-1]:.2f} after",
                      flush=True)
                measured[name].append(split(rows, args.warmup))
        print(f"\n== {prompts} prompts x {new} new tokens ==")
        print(f"1-minute load over the runs: {spread(loads, 2)}")
        for name, runs in measured.items():
            seconds = [run["iteration"] for run in runs]
            print(f"{name:8s} s/iteration {spread(seconds)}  steps/hour {spread([3600 / s for s in seconds], 0)}  "
                  f"trainer busy {spread([r['trainer_busy'] for r in runs])}  "
                  f"wait for rollout {spread([r['wait_for_rollout'] for r in runs])}  "
                  + (f"producer busy {spread([r['producer_busy'] for r in runs])}  "
                     f"wait for trainer {spread([r['wait_for_trainer'] for r in runs])}  "
                     if VARIANTS[name][0] else f"generate {spread([r['generate'] for r in runs])}  ")
                  + f"length {statistics.median(r['length'] for r in runs):.0f}"
                  + (f"  responses of two versions {spread([r['mixed'] for r in runs], 2)}" if name in PARTIAL else ""))
        for name in (n for n in measured if VARIANTS[n][0]):
            for base in ("sync-2t", "sync-1t"):
                if base in measured:
                    ratios = [b["iteration"] / a["iteration"] for a, b in zip(measured[name], measured[base])]
                    print(f"{name} speed-up over {base}: {spread(ratios)}")
            runs = measured[name]
            overlap = [r["iteration"] / max(r["trainer_busy"], r["producer_busy"]) for r in runs]
            print(f"{name} iteration / its slower side's busy time: {spread(overlap)}")
        for name in (n for n in PARTIAL if n in measured and "async-1" in measured):
            pairs = list(zip(measured[name], measured["async-1"]))
            print(f"{name} steps/hour over async-1: {spread([b['iteration'] / a['iteration'] for a, b in pairs])}")
            print(f"{name} producer idle (wait for trainer) minus async-1's, s/iteration: "
                  f"{spread([a['wait_for_trainer'] - b['wait_for_trainer'] for a, b in pairs])}")
        if "async-1" in measured and "sync-1t" in measured:
            errors = []
            for a, s in zip(measured["async-1"], measured["sync-1t"]):
                rest = s["iteration"] - s["generate"]
                predicted = s["iteration"] / max(s["generate"], rest)
                errors.append((s["iteration"] / a["iteration"]) / predicted - 1)
            print(f"async-1 over sync-1t, measured / predicted from sync-1t's split - 1: {spread(errors)}")


if __name__ == "__main__":
    main()
