"""Start-up time of every stage's command line: ``--help`` and a bad flag (``--dtype fp64``), each in a fresh
process, as a newcomer meets them.

Each repetition runs every (checkout, stage, case) once, in an order rotated by one position per repetition, so
no checkout or stage always runs first (cold caches) or last. Prints per (checkout, case) over all stages and
repetitions the median [min, max] of the wall time and of the CPU time (user + system of the process: on a
shared, loaded machine the wall time mostly measures waiting for a core, the CPU time what the start costs), and
the ratio of the medians against the first checkout.

Usage: python scripts/benchmarks/bench_startup.py [--checkout DIR ...] [--repeat 5]
    (default checkout: this one; e.g. ``--checkout /path/to/old/clone --checkout .`` for before / after)
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Sequence, Tuple

STAGES = ("sft", "rm", "dpo", "ppo")
CASES = {"help": ["--help"], "bad_flag": ["--dtype", "fp64"]}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from repeats import rotated, spread  # noqa: E402


def run_once(checkout: str, stage: str, case: str) -> Tuple[float, float, int]:
    """``(wall s, CPU s, exit code)`` of ``python -m dschat.cli.<stage> <case flags>`` in ``checkout``."""
    env = {**os.environ, "PYTHONPATH": checkout, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", f"dschat.cli.{stage}", *CASES[case]], cwd=checkout, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, process.returncode


def expected_code(case: str) -> int:
    return 0 if case == "help" else 2


def measure(checkouts: Sequence[str], repeat: int) -> Dict[Tuple[str, str], List[Tuple[float, float]]]:
    jobs = list(itertools.product(checkouts, STAGES, CASES))
    times: Dict[Tuple[str, str], List[Tuple[float, float]]] = {}
    for rep in range(repeat):
        for checkout, stage, case in rotated(jobs, rep):
            wall, cpu, code = run_once(checkout, stage, case)
            if code != expected_code(case):
                raise SystemExit(f"{checkout}: dschat.cli.{stage} {' '.join(CASES[case])} exited {code}")
            times.setdefault((checkout, case), []).append((wall, cpu))
            print(f"rep {rep + 1} {os.path.basename(checkout) or checkout} {stage:3s} {case:8s} "
                  f"wall {wall:6.2f} s  cpu {cpu:5.2f} s", flush=True)
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", action="append", default=[], help="a clone to time (repeatable; default: this)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    checkouts = [os.path.abspath(path) for path in args.checkout] or [ROOT]
    times = measure(checkouts, args.repeat)
    print(f"\n{len(STAGES)} stages x {args.repeat} repetitions per row; median [min, max]")
    for case in CASES:
        base = statistics.median(wall for wall, _ in times[(checkouts[0], case)])
        for checkout in checkouts:
            walls = [wall for wall, _ in times[(checkout, case)]]
            cpus = [cpu for _, cpu in times[(checkout, case)]]
            print(f"{case:8s} {checkout}: wall {spread(walls, 2, ' s')}  cpu {spread(cpus, 2, ' s')}  "
                  f"wall ratio to first {statistics.median(walls) / base:.2f}")


if __name__ == "__main__":
    main()
