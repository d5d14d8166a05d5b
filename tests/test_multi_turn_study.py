"""The multi-turn comparison's analysis (evaluation/multi_turn_study.py, plan docs/study/plans/multi-turn-macros.md):
the paired AUC difference and its p against scipy's paired t-test, failed runs leaving their seed's pair."""
from __future__ import annotations

import pytest
from scipy import stats

from evaluation.multi_turn_study import analyse


def record(arm, seed, curve, failed=False):
    return {"arm": arm, "seed": seed, "eval_score": {str(s): v for s, v in zip((0, 10, 20), curve)},
            "final_score": curve[-1], "failed": failed}


def test_the_paired_auc_difference_and_p_are_scipys_paired_t_over_the_complete_seeds():
    base = {101: (0.0, 0.2, 0.4), 102: (0.1, 0.1, 0.3), 103: (0.0, 0.3, 0.2), 104: (0.05, 0.0, 0.1)}
    method = {101: (0.0, 0.4, 0.8), 102: (0.1, 0.2, 0.2), 103: (0.0, 0.3, 0.5), 104: (0.05, 0.1, 0.0)}
    records = [record("ppo", s, c) for s, c in base.items()] + [record("mappo-turn", s, c) for s, c in method.items()]
    records += [record("ppo", 105, (0, 0, 0)), record("mappo-turn", 105, (0, 0, 0), failed=True)]
    result = analyse(records)

    def auc(curve):  # trapezoid over steps 0, 10, 20 divided by 20
        return (10 * (curve[0] + curve[1]) / 2 + 10 * (curve[1] + curve[2]) / 2) / 20

    a, b = [auc(base[s]) for s in sorted(base)], [auc(method[s]) for s in sorted(method)]
    assert result["seeds"] == [101, 102, 103, 104] and result["failed"] == 1
    assert result["auc_ppo"] == pytest.approx(a) and result["auc_mappo-turn"] == pytest.approx(b)
    assert result["p"] == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert result["difference"].startswith(f"{sum(y - x for x, y in zip(a, b)) / 4:.3f} [")
    assert result["ahead"] == sum(y > x for x, y in zip(a, b))


def test_the_page_quotes_the_committed_runs_analysis():
    """docs/multi-turn.md's table is analyse() of the committed runs (16 records, none failed)."""
    import json
    import os

    from conftest import ROOT

    with open(os.path.join(ROOT, "docs", "study", "multi-turn-macros.jsonl")) as handle:
        records = [json.loads(line) for line in handle]
    result = analyse(records)
    with open(os.path.join(ROOT, "docs", "multi-turn.md")) as handle:
        page = handle.read()
    assert len(records) == 16 and result["failed"] == 0 and len(result["seeds"]) == 8
    assert f"| {result['difference']} | {result['ahead']} of 8 | {result['p']:.2f} |" in page
    assert f"| {result['final_difference']} |" in page
