"""The study's tests (evaluation.study.stats) against hand computations, and the equivalence margins against
the committed runs they were derived from."""
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from evaluation.study.design import EQUIVALENCE_MARGINS
from evaluation.study.stats import (across_model_seeds, adjust_families, collapse, collapse_floored,
                                    held_out_best_vs_best, holm, new_model_seed_interval, paired_t_p,
                                    seeds_for_equivalence, t_interval, tost)

ROOT = Path(__file__).resolve().parents[1]


def test_tost_by_hand():
    diffs = [0.001, 0.003, -0.002, 0.002]  # mean 0.001, s = sqrt(14/3) * 1e-3, se = s / 2
    se = (14 / 3) ** 0.5 * 1e-3 / 2
    result = tost(diffs, 0.01)
    t95 = stats.t.ppf(0.95, 3)  # 2.353363
    assert (result.low, result.high) == pytest.approx((0.001 - t95 * se, 0.001 + t95 * se))
    # the larger one-sided p is the test against +margin: P(T_3 <= (0.001 - 0.01) / se)
    assert result.p == pytest.approx(stats.t.cdf(-0.009 / se, 3))
    assert result.equivalent
    wide = tost(diffs, 0.002)  # the 90% interval reaches past +0.002
    assert not wide.equivalent and wide.high > 0.002
    assert tost([0.02, 0.02], 0.01).p == 1.0 and tost([0.0, 0.0], 0.01).p == 0.0


def test_tost_equivalent_exactly_when_the_90_percent_interval_is_inside_the_margin():
    diffs = [0.004, 0.009, 0.001, 0.006, 0.012]
    for margin in (0.005, 0.009, 0.0105, 0.011, 0.02):
        result = tost(diffs, margin)
        assert result.equivalent == (-margin < result.low and result.high < margin)


def test_paired_t_p_is_scipys_one_sample_t_test():
    diffs = [0.4, -0.1, 0.3, 0.2]
    assert paired_t_p(diffs) == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue)
    assert paired_t_p([0.0, 0.0]) == 1.0


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04, 0.5 (m = 4): 0.04, 0.06, 0.08, 0.5
    adjusted = holm({"a": 0.04, "b": 0.01, "c": 0.5, "d": 0.02})
    assert adjusted == pytest.approx({"b": 0.04, "d": 0.06, "a": 0.08, "c": 0.5})
    # monotone: a later smaller product keeps the running maximum; capped at 1
    assert holm({"x": 0.03, "y": 0.031, "z": 0.9}) == pytest.approx({"x": 0.09, "y": 0.09, "z": 0.9})
    assert holm({"x": 0.6, "y": 0.7}) == pytest.approx({"x": 1.0, "y": 1.0})


def test_best_vs_best_is_chosen_on_one_half_and_compared_on_the_other():
    finals = {"p1": {1: 0.10, 2: 0.10, 3: 0.20, 4: 0.20},   # best of family a on seeds 3-4 only
              "p2": {1: 0.15, 2: 0.15, 3: 0.10, 4: 0.10},   # best of family a on seeds 1-2
              "m1": {1: 0.30, 2: 0.30, 3: 0.12, 4: 0.12},
              "m2": {1: 0.11, 2: 0.11, 3: 0.25, 4: 0.26}}
    first, second = held_out_best_vs_best(finals, ["p1", "p2"], ["m1", "m2"], [4, 3, 2, 1])
    assert (first.select_seeds, first.test_seeds, first.best_a, first.best_b) == ((1, 2), (3, 4), "p2", "m1")
    assert first.diffs == pytest.approx((0.12 - 0.10, 0.12 - 0.10))
    assert (second.best_a, second.best_b) == ("p1", "m2")
    assert second.diffs == pytest.approx((0.11 - 0.10, 0.11 - 0.10))
    rm = {arm: {s: 10 * v + s for s, v in by_seed.items()} for arm, by_seed in finals.items()}
    chosen_by_gold = held_out_best_vs_best(finals, ["p1", "p2"], ["m1", "m2"], [1, 2, 3, 4], outcome=rm)[0]
    assert (chosen_by_gold.best_a, chosen_by_gold.best_b) == ("p2", "m1")  # chosen on gold, scored on rm
    assert chosen_by_gold.diffs == pytest.approx((10 * 0.02, 10 * 0.02))


def test_collapse_is_a_fall_below_half_the_start():
    assert collapse([0, 4, 8], [116, 60, 100]) is None  # 60 > 58
    dip = collapse([0, 4, 8, 12], [116, 57, 40, 100])
    assert (dip.lowest, dip.lowest_step, dip.ends_collapsed) == (40, 8, False)
    end = collapse([0, 4, 8], [105, 80, 22])
    assert end.ends_collapsed and end.text() == "105 → 22 at step 8, final 22 (ends collapsed)"


def test_the_margins_are_a_third_of_token_ppos_lambda_gain_in_the_round_two_runs():
    runs = {}
    for line in (ROOT / "docs/study/runs.jsonl").read_text().splitlines():
        run = json.loads(line)
        if run["task"] == "long" and run["arm"] in ("ppo", "ppo-lam1") and run["seed"] <= 8:
            runs[run["arm"], run["seed"]] = run
    for metric, margin in EQUIVALENCE_MARGINS.items():
        gain = sum(runs["ppo-lam1", s][metric][-1] - runs["ppo", s][metric][-1] for s in range(1, 9)) / 8
        assert math.isclose(margin, gain / 3, abs_tol=5e-4), (metric, gain / 3)


def test_seeds_for_equivalence_is_the_first_n_whose_tost_passes():
    diffs = [0.004, 0.014, -0.006, 0.01, 0.0]  # mean 0.0044, inside ±0.01, not yet shown equivalent
    assert not tost(diffs, 0.01).equivalent
    n = seeds_for_equivalence(diffs, 0.01)
    sd = statistics.stdev(diffs)
    room = 0.01 - statistics.fmean(diffs)
    assert stats.t.ppf(0.95, n - 1) * sd / n ** 0.5 < room <= stats.t.ppf(0.95, n - 2) * sd / (n - 1) ** 0.5 and n > 5
    assert seeds_for_equivalence([0.02, 0.03], 0.01) is None  # the mean is outside the margin


def test_across_model_seeds_by_the_anova_table():
    diffs = [[0.01, 0.03, 0.02], [0.00, -0.02, 0.02], [0.05, 0.04, 0.06]]  # 3 model seeds x 3 PPO seeds
    k, n = 3, 3
    means = [sum(g) / n for g in diffs]  # 0.02, 0.0, 0.05
    grand = sum(means) / k
    ss_between = n * sum((m - grand) ** 2 for m in means)
    ss_within = sum((x - m) ** 2 for g, m in zip(diffs, means) for x in g)
    ms_between, ms_within = ss_between / (k - 1), ss_within / (k * (n - 1))
    found = across_model_seeds(diffs, margin=0.01)
    assert found.means == pytest.approx(means) and found.mean == pytest.approx(grand)
    half = stats.t.ppf(0.975, k - 1) * math.sqrt(ms_between / (k * n))  # SE of the grand mean from MS_between
    assert (found.low, found.high) == pytest.approx((grand - half, grand + half))
    assert found.within_sd == pytest.approx(math.sqrt(ms_within))
    assert found.between_sd == pytest.approx(math.sqrt((ms_between - ms_within) / n))
    assert found.p_differ == pytest.approx(stats.f.sf(ms_between / ms_within, k - 1, k * (n - 1)))
    assert found.equivalence.p == pytest.approx(tost(means, 0.01).p) and not found.equivalence.equivalent
    same = across_model_seeds([[0.0, 0.2], [0.2, 0.0]], margin=0.5)  # means equal: no model-seed spread at all
    assert same.between_sd == 0.0 and same.low == same.high == pytest.approx(0.1) and same.equivalence.equivalent
    with pytest.raises(ValueError):
        across_model_seeds([[0.1, 0.2], [0.1]], margin=0.01)


def test_across_model_seeds_covers_where_pooling_the_ppo_seeds_does_not():
    """Simulated: 3 model seeds x 8 PPO seeds, the model seed's effect as large as the PPO seed's. The nested
    interval covers the true mean at its level; one t interval over all 24 differences, as if they were independent,
    does not."""
    rng = np.random.default_rng(0)
    covered = pooled = 0
    trials = 1000
    for _ in range(trials):
        diffs = rng.normal(0.0, 1.0, size=(3, 1)) + rng.normal(0.0, 1.0, size=(3, 8))
        found = across_model_seeds(diffs, margin=1.0)
        covered += found.low < 0 < found.high
        flat = diffs.ravel()
        half = stats.t.ppf(0.975, flat.size - 1) * flat.std(ddof=1) / math.sqrt(flat.size)
        pooled += abs(flat.mean()) < half
    assert 0.925 < covered / trials < 0.975
    assert pooled / trials < 0.8


def test_adjust_families_holms_differences_and_equivalences_within_each_family():
    a, b, c = [0.001, 0.002, 0.003, 0.002], [0.010, 0.012, 0.011, 0.013], [0.0, 0.004, -0.002, 0.001]
    found = adjust_families({"one": {"a": (a, 0.01), "b": (b, 0.01)}, "two": {"c": (c, 0.01)}})
    pa, pb = paired_t_p(a), paired_t_p(b)
    assert found["a"].family == "one" and found["c"].family == "two"
    assert found["a"].p == pa and found["b"].p_holm == pytest.approx(min(1, 2 * min(pa, pb)))
    assert found["a"].p_holm == pytest.approx(max(min(1, 2 * min(pa, pb)), pa))
    ta, tb = tost(a, 0.01).p, tost(b, 0.01).p  # b's mean is past the margin: not equivalent, p near 1
    assert found["a"].equivalence.p == pytest.approx(min(1, 2 * ta)) and ta < tb
    assert found["a"].equivalence.holm and "Holm-adjusted TOST p" in found["a"].equivalence.text()
    assert found["c"].equivalence.p == pytest.approx(tost(c, 0.01).p)  # a family of one: unchanged
    with pytest.raises(ValueError, match="'a' is in families 'one' and 'two'"):
        adjust_families({"one": {"a": (a, 0.01)}, "two": {"a": (a, 0.01)}})


def test_new_model_seed_interval_by_hand():
    values = [[0.14, 0.16], [0.12, 0.12], [0.10, 0.12]]
    found = new_model_seed_interval(values)
    means = [0.15, 0.12, 0.11]
    t = stats.t.ppf(0.975, 2)
    half = t * (statistics.variance(means) * 4 / 3) ** 0.5
    assert (found.mean_low, found.mean_high) == pytest.approx((statistics.fmean(means) - half,
                                                                 statistics.fmean(means) + half))
    assert found.mean_low == pytest.approx(t_interval(means, new_seed=True)[0])
    run_half = t * (statistics.variance(means) * 4 / 3 + statistics.fmean([0.0002, 0.0, 0.0002]) / 2) ** 0.5
    assert found.run_high == pytest.approx(statistics.fmean(means) + run_half)
    with pytest.raises(ValueError):
        new_model_seed_interval([[0.1, 0.2]])


def test_collapse_floored_scores_a_run_that_ends_collapsed_at_its_step_zero_gold():
    assert collapse_floored([0.07, 0.12, 0.16], [116, 80, 57]) == 0.07  # 57 < 58 = half of 116: ends collapsed
    assert collapse_floored([0.07, 0.12, 0.16], [116, 30, 58]) == 0.16  # fell below half, came back: not floored
