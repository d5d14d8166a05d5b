"""The reasoning evaluation (accuracy, pass@k, length, right answers through a wrong step) and the comparison's
analysis (paired differences, Holm over the plan's family, verdicts), against figures computed here."""
from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from dschat.data import load_pairs
from evaluation.reasoning import summarize
from evaluation.reasoning_comparison import MARGIN, curves, verdicts


def test_summary_of_greedy_and_sampled_responses():
    pairs = load_pairs("arithmetic", "validation")[:3]
    prompts, refs = [p.prompt for p in pairs], [p.chosen for p in pairs]
    answer = [int(r.rsplit(" ", 1)[1]) for r in refs]
    lucky = f" 1 + 1 = 3\nAnswer: {answer[1]}"  # right answer, wrong chain (no step of it follows)
    greedy = [[(refs[0], 80)], [(lucky, 10)], [("Answer: 0" if answer[2] else "Answer: 1", 6)]]
    sampled = [[(refs[0], 1), ("x", 1), ("y", 1), ("z", 1)], [("x", 2)] * 4,
               [(refs[2], 3), (refs[2], 3), ("x", 3), ("y", 3)]]
    result = summarize(prompts, refs, greedy, sampled, "arithmetic", ks=[1, 2, 8])
    assert result["accuracy"] == pytest.approx(2 / 3) and result["response_length"] == pytest.approx(32)
    assert result["right_answers_with_a_wrong_step"] == 1
    assert result["steps_right"] == pytest.approx(8 / 24) and result["chains_right"] == pytest.approx(1 / 3)
    # pass@k = 1 - C(n - c, k) / C(n, k) per problem, n = 4, c = 1, 0, 2
    for k in (1, 2):
        expected = sum(1 - math.comb(4 - c, k) / math.comb(4, k) for c in (1, 0, 2)) / 3
        assert result[f"pass@{k}"] == pytest.approx(expected)
    assert "pass@8" not in result and result["sampled_response_length"] == pytest.approx(2)


def run(arm, seed, accuracy, failed=False):
    return {"arm": arm, "seed": seed, "final_accuracy": accuracy, "failed": failed,
            "accuracy": [[0, 0.2], [10, accuracy]]}


def test_verdicts_are_holm_adjusted_paired_tests_over_the_family():
    rng = random.Random(0)
    runs, diffs = [], {"ma-grpo-step": [], "ma-grpo-fixed5": [], "ma-ppo-step": []}
    effect = {"ma-grpo-step": (0.10, 0.01), "ma-grpo-fixed5": (0.0, 0.08), "ma-ppo-step": (0.0, 0.01)}  # mean, spread
    for seed in range(1, 9):
        base = {"grpo": 0.3 + rng.gauss(0, 0.02), "ppo": 0.25 + rng.gauss(0, 0.02)}
        runs += [run(arm, seed, value) for arm, value in base.items()]
        for method, baseline in (("ma-grpo-step", "grpo"), ("ma-grpo-fixed5", "grpo"), ("ma-ppo-step", "ppo")):
            mean, spread = effect[method]
            value = base[baseline] + mean + spread * (-1) ** seed * (1 + seed / 10)
            runs.append(run(method, seed, value))
            diffs[method].append(value - base[baseline])
    runs.append(run("ma-ppo-step", 9, 0.9, failed=True))  # a failed run is left out
    result = verdicts(runs)
    raw = {m: stats.ttest_1samp(d, 0).pvalue for m, d in diffs.items()}
    order = sorted(raw, key=raw.get)
    holm, running = {}, 0.0
    for rank, m in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[m]))
        holm[m] = running
    for method, d in diffs.items():
        assert result[method]["seeds"] == 8
        assert result[method]["mean_difference"] == pytest.approx(sum(d) / 8)
        assert result[method]["p_holm"] == pytest.approx(holm[method])
    assert result["ma-grpo-step"]["verdict"] == "better"
    assert result["ma-ppo-step"]["verdict"] == "equivalent"  # small spread, mean well inside the margin
    assert result["ma-grpo-fixed5"]["verdict"] == "not decided"  # the noise spans the margin
    assert MARGIN == 0.05


def test_curves_average_finished_seeds_per_step():
    runs = [run("grpo", 1, 0.4), run("grpo", 2, 0.6), run("grpo", 3, 1.0, failed=True)]
    assert curves(runs) == {"grpo": [[0, pytest.approx(0.2)], [10, pytest.approx(0.5)]]}


def test_verdict_table_and_readme_line_say_a_partial_set_is_partial():
    from evaluation.reasoning_comparison import readme_line, verdict_lines

    runs = [run(arm, seed, 0.3 + 0.01 * seed) for seed in (1, 2, 3) for arm in ("grpo", "ma-grpo-step")]
    runs += [run("ppo", 1, 0.2), run("ma-ppo-step", 1, 0.9, failed=True)]
    lines = verdict_lines(runs)
    assert lines[0].startswith("8 of 40 planned runs recorded, 1 failed; **partial**, not made: ma-grpo-fixed5 1, ")
    assert "ma-ppo-step 1" not in lines[0] and "ma-ppo-step 8." in lines[0]
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ma-")}
    assert rows["ma-grpo-step − grpo"].startswith("| ma-grpo-step − grpo | 3 | +0.000 |")  # equal per seed
    assert rows["ma-ppo-step − ppo"].endswith("| fewer than 2 | – | – | – | **not decided** |")
    line = readme_line(runs)
    assert "(partial: 8 of 40 runs)" in line and "ma-ppo-step − ppo not decided" in line
    assert line.startswith("- *Would macro actions hurt math reasoning?* (reviewer QYzk)")  # not a study bold lead
    full = [run(arm, seed, 0.3) for seed in range(1, 9) for arm in ("grpo", "ma-grpo-step", "ma-grpo-fixed5", "ppo",
                                                                     "ma-ppo-step")]
    assert verdict_lines(full)[0] == "40 of 40 planned runs recorded, 0 failed." and "partial" not in readme_line(full)
