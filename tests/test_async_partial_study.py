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
    records = ([{"arm": "k1", "seed": s, "failed": False, "final_gold": g} for s, g in k1.items()]
               + [{"arm": "k1-partial", "seed": s, "failed": False, "final_gold": g} for s, g in partial.items()]
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
