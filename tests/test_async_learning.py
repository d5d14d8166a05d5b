"""evaluation.async_learning: K = 1 against K = 0, paired by seed, TOST within the study's gold margin."""
import math

import pytest
from scipy import stats as scipy_stats

from evaluation.async_learning import comparison, report_lines


def summary(arm, ahead, seed, gold, length=110.0):
    return {"task": "long", "arm": arm, "seed": seed, "async_rollout": ahead, "gold": [0.06, gold],
            "steps": [0, 48], "rm": [2.5, 3.0], "hours": [0.0, 0.01], "length": [116.0, length], "machine": {"cpu": "test"}}


def test_paired_difference_interval_and_tost_by_hand():
    k0 = {9: 0.140, 10: 0.150, 11: 0.145, 12: 0.138}
    k1 = {9: 0.142, 10: 0.149, 11: 0.147, 12: 0.141}
    runs = [summary("ppo-lam1", 0, s, g) for s, g in k0.items()] + [summary("ppo-lam1", 1, s, g) for s, g in k1.items()]
    runs += [summary("mappo-lam1", 0, 9, 0.1), summary("mappo-lam1", 1, 10, 0.1)]  # no pair: left out
    result = comparison(runs)
    assert set(result) == {"ppo-lam1"}
    row = result["ppo-lam1"]
    diffs = [k1[s] - k0[s] for s in sorted(k0)]
    mean = sum(diffs) / 4
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3 / 4)
    half = scipy_stats.t.ppf(0.975, 3) * se
    assert row["mean"] == pytest.approx(mean) and row["ci"] == pytest.approx((mean - half, mean + half))
    p = max(scipy_stats.t.sf((mean + 0.01) / se, 3), scipy_stats.t.cdf((mean - 0.01) / se, 3))
    assert row["tost_p"] == pytest.approx(p) and row["tost_p_holm"] == pytest.approx(p)  # a family of one
    assert row["p"] == pytest.approx(scipy_stats.ttest_1samp(diffs, 0).pvalue)
    assert "| equivalent within ±0.01 |" in report_lines(runs)[4]


def test_the_sensitivity_drops_the_seeds_on_which_either_run_collapsed():
    """A run that failed — final length below half its step-0 length (116 -> 57), or final gold below step 0's —
    takes its seed out of the sensitivity table on both sides, and the report names it."""
    runs = [summary("ppo-lam1", k, s, 0.14 + 0.001 * s + 0.002 * k) for s in (9, 10, 11) for k in (0, 1)]
    runs.append(summary("ppo-lam1", 0, 12, 0.10, length=57.0))
    runs.append(summary("ppo-lam1", 1, 12, 0.20))
    runs += [summary("ppo-lam1", 0, 13, 0.15), summary("ppo-lam1", 1, 13, 0.05)]  # gold below step 0's 0.06
    assert comparison(runs)["ppo-lam1"]["seeds"] == [9, 10, 11, 12, 13]
    kept = comparison(runs, drop_failed=True)["ppo-lam1"]
    assert kept["seeds"] == [9, 10, 11] and kept["diffs"] == pytest.approx([0.002] * 3)
    text = "\n".join(report_lines(runs))
    assert "ppo-lam1 K = 0 seed 12 (collapsed; length 116 → 57, gold 0.100)" in text
    assert "ppo-lam1 K = 1 seed 13 (gold below step 0; length 116 → 110, gold 0.050)" in text


def test_the_figures_clock_is_step_times_the_measured_seconds_of_its_k():
    from evaluation.async_learning import clocked

    runs = [summary("ppo-lam1", 0, 9, 0.1), summary("ppo-lam1", 1, 9, 0.1)]
    assert [s["hours"] for s in clocked(runs, {0: 36.0, 1: 18.0})] == [[0.0, 48 * 36 / 3600], [0.0, 48 * 18 / 3600]]
    assert clocked(runs, {}) == runs
