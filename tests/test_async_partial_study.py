"""The ``async-partial`` comparison's analysis (evaluation/async_partial.py) against its plan, by hand."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from evaluation.async_partial import analysis


def test_the_analysis_pairs_finished_seeds_and_tests_the_plans_margin():
    """Only seeds with both arms finished are paired (a failed run and an unpaired seed leave it); d = partial −
    k1; the mean's 95% t interval, the paired t test and TOST within ±0.010 recomputed here."""
    k1 = {9: 0.140, 10: 0.150, 11: 0.132, 12: 0.145}
    partial = {9: 0.143, 10: 0.147, 11: 0.139, 13: 0.2}
    steady = [116.0, 110.0]
    records = ([{"arm": "k1", "seed": s, "failed": False, "final_gold": g, "length": steady} for s, g in k1.items()]
               + [{"arm": "k1-partial", "seed": s, "failed": False, "final_gold": g, "length": steady}
                  for s, g in partial.items()]
               + [{"arm": "k1-partial", "seed": 12, "failed": True}])
    result = analysis(records)
    diffs = [partial[s] - k1[s] for s in (9, 10, 11)]
    n, mean = 3, sum(diffs) / 3
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n)
    q = stats.t.ppf(0.975, n - 1)
    assert result["seeds"] == [9, 10, 11] and result["failed"] == 1 and result["runs"] == 9
    assert result["mean"] == pytest.approx(mean)
    assert result["ci"] == pytest.approx((mean - q * se, mean + q * se))
    assert result["p"] == pytest.approx(2 * stats.t.sf(abs(mean) / se, n - 1))
    tost_p = max(stats.t.sf((mean + 0.01) / se, n - 1), stats.t.cdf((mean - 0.01) / se, n - 1))
    assert result["tost_p"] == pytest.approx(tost_p)
    assert result["reading"] == ("equivalent within ±0.01" if tost_p < 0.05 else "not decided")


def test_the_sensitivity_leaves_out_the_seeds_on_which_either_run_collapsed():
    """The plan's secondary analysis: a seed whose run's final length is below half its step-0 length (either arm)
    leaves the comparison; the rest are tested again, by hand here."""
    gold = {"k1": {1: 0.14, 2: 0.15, 3: 0.10, 4: 0.13}, "k1-partial": {1: 0.15, 2: 0.149, 3: 0.16, 4: 0.135}}
    lengths = {("k1", 3): [116.0, 57.0], ("k1-partial", 2): [116.0, 58.5]}
    records = [{"arm": arm, "seed": s, "failed": False, "final_gold": g, "length": lengths.get((arm, s), [116.0, 100.0])}
               for arm, by_seed in gold.items() for s, g in by_seed.items()]
    result = analysis(records)
    assert result["collapsed_seeds"] == [3] and len(result["diffs"]) == 4
    kept = [gold["k1-partial"][s] - gold["k1"][s] for s in (1, 2, 4)]
    mean = sum(kept) / 3
    se = math.sqrt(sum((d - mean) ** 2 for d in kept) / 2 / 3)
    assert result["without_collapsed"]["mean"] == pytest.approx(mean)
    assert result["without_collapsed"]["p"] == pytest.approx(2 * stats.t.sf(abs(mean) / se, 2))
    assert "without_collapsed" not in analysis([r for r in records if r["seed"] != 3])
