"""The study page's sentences (``docs/study-findings.md``, the README's study section before the docs site), written
from the same summaries as the report (:mod:`evaluation.study.report`): every number in them is computed here, and
``tests/test_study_readme.py`` requires the page to contain them verbatim, so a sentence cannot outlive its data.

    python -m evaluation.study_findings docs/study/runs.jsonl                                # prints the bullets
    python -m evaluation.study_findings docs/study/runs.jsonl --readme docs/study-findings.md  # writes them, and both
                                                                                              # tables, in the page
    python -m evaluation.study_findings docs/study/runs.jsonl --headline README.md   # the README's headline: the
                                                                                     # bold leads of HEADLINE's bullets
"""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from scipy import stats as scipy_stats

from dschat.core.entrypoint import ArgumentParser
from evaluation.study.decisions import (adjusted_test, bits_equal, collapse_sensitivity, confirmation_verdicts,
                                        model_seed_comparisons, model_seed_failures,
                                        model_seed_values, multiplicity, new_machine_checks, ordering_agreement,
                                        own_family, parity_by_stop, plateau, published_new_seed, reading, within_spread)
from evaluation.study.design import (EQUIVALENCE_MARGINS, MAPPO_LAMBDA_ARMS, MODEL_SEED_PAIRS, TASKS, VARIATION_COVERED)
from evaluation.study.position_report import (position_groups, positions_against_runs, sampling_noise,
                                              sampling_seed_comparison, sampling_seed_text)
from evaluation.study.report import ASYNC_RUNS, RERUNS, ROOT, read_jsonl
from evaluation.study.stats import (ALPHA, FAILED_RULE, failure, few_df, format_p, mean_estimate,
                                    new_model_seed_interval, tost)
from evaluation.study.summaries import arm_lambda, by_arm, common_seeds, failures, mappo_family, seed_split
from evaluation.study.tables import commits_text, confirmation_table, readme_table


def _finals(groups, arm, metric, seeds) -> List[float]:
    return [groups[arm][s][metric][-1] for s in seeds]


def _diff(groups, arm, base, metric, tests, digits: int = 3, task: str = "long"):
    """(text of arm − base paired on their common seeds, seeds ahead, seeds, its test after the multiplicity rule)."""
    seeds = common_seeds(groups[arm], groups[base])
    diffs = [a - b for a, b in zip(_finals(groups, arm, metric, seeds), _finals(groups, base, metric, seeds))]
    return (mean_estimate(diffs).text(digits), sum(d > 0 for d in diffs), len(seeds),
            adjusted_test(tests, task, arm, base, metric, seeds))


def _failed(groups, arms, seeds) -> str:
    """How many of the runs of ``arms`` on ``seeds`` failed (:func:`evaluation.study.stats.failure`)."""
    runs = [groups[a][s] for a in arms for s in seeds]
    return f"{sum(bool(failure(r)) for r in runs)} of its {len(runs)} runs failed"


def _seed_range(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}"


def verdict_bullet(groups, tests) -> Optional[str]:
    """The answer to the study's question: MA-PPO's best against token PPO's best, each chosen on other seeds."""
    exploration, _ = seed_split(groups)
    best, confirmed = confirmation_verdicts(groups)
    if not confirmed:
        return None
    adjusted = {m: tests["verdict", "confirmation", m] for m in confirmed}
    gold, rm = confirmed["gold"], confirmed["rm"]
    gold_reading = reading(gold.diff.mean, adjusted["gold"].p_holm, adjusted["gold"].equivalence, "MA-PPO",
                           "token PPO")
    if gold_reading.startswith("equivalent"):
        answer = f"No: on gold the two are {gold_reading}"
    elif gold_reading.startswith("MA-PPO"):
        answer = f"Yes: on gold, {gold_reading}"
    elif gold_reading.startswith("token PPO"):
        answer = f"No: on gold, {gold_reading}"
    else:
        answer = (f"Not decided by {gold.diff.n} seeds: on gold no difference is shown, and equivalence within "
                  f"±{gold.equivalence.margin:g} is not shown either")
    chosen = ", ".join(dict.fromkeys(f.best_b for f in gold.folds))
    text = f"- **Does MA-PPO beat token PPO when both use their best λ? {answer}.** "
    candidates = mappo_family(groups, gold.seeds)
    mappo = (f"MA-PPO's best ({chosen}, chosen on the other half of these seeds among {', '.join(candidates)})"
             if len(candidates) > 1 else f"MA-PPO n = 5 at λ = {arm_lambda(chosen):g} ({chosen})")
    text += (f"On fresh seeds {_seed_range(gold.seeds)} (SFT + RM seed {TASKS['long'].model_seed}; "
             f"{len(gold.seeds)} per arm, trained after the margin and the candidates were fixed; this selection "
             "procedure was committed after the first of these runs had finished, and an interim result on 5 seed "
             f"pairs was published before the last: report, \"Order of decisions\"), {mappo} − "
             f"token PPO at λ = {arm_lambda(best):g} (its best λ on seeds {_seed_range(exploration)}): ")
    text += (f"exploratory by the pre-registration check (report, \"Pre-registration, checked\"): gold {gold.diff.text()} "
             f"({gold.ahead}/{gold.diff.n} seeds ahead, {_failed(groups, (best, *candidates), gold.seeds)}, Holm p "
             f"{format_p(adjusted['gold'].p_holm)}; {adjusted['gold'].equivalence.text()}), RM {rm.diff.text()} "
             f"({rm.ahead}/{rm.diff.n}, Holm p {format_p(adjusted['rm'].p_holm)}; "
             f"{reading(rm.diff.mean, adjusted['rm'].p_holm, adjusted['rm'].equivalence, 'MA-PPO', 'token PPO')}). The margin "
             f"Δ (gold ±{{:g}}, RM ±{{:g}}) is a third of what tuning token PPO's λ from 0.95 to 1 bought on seeds 1-8, fixed "
             f"before round 3's runs (a first round, 2026-11-23, had run both methods at λ = 1 on 5 seeds per "
             f"task).".format(EQUIVALENCE_MARGINS["gold"], EQUIVALENCE_MARGINS["rm"]))
    sensitivity = collapse_sensitivity(groups)
    if sensitivity:
        parts = []
        for name, v in sensitivity.items():
            test = tests["verdict", name, "gold"]
            parts.append(f"{name}, gold {v.diff.text()} ({v.ahead}/{v.diff.n}; "
                         f"{reading(v.diff.mean, test.p_holm, test.equivalence, 'MA-PPO', 'token PPO')})")
        text += (" Collapse-robust, beside it (Holm over the two; report, \"Collapse sensitivity\"): "
                 + "; ".join(parts) + ".")
    if all(arm_lambda(f.best_a) == arm_lambda(f.best_b) == 1 for f in gold.folds):
        text += (" At λ = 1 (γ = 1) neither method discounts the terminal reward along the response, so what is left "
                 "between them is the macro itself: its value estimates and its per-macro update.")
    return text


def paper_lambda_bullet(groups, summaries, tests) -> Optional[str]:
    """MA-PPO n = 5 against PPO at the paper's λ = 0.95: gold, RM with the seeds behind, lengths; and the same pair
    on the further SFT + RM seeds."""
    if "mappo" not in groups or "ppo" not in groups:
        return None
    gold, gold_ahead, n, gold_test = _diff(groups, "mappo", "ppo", "gold", tests)
    rm, rm_ahead, _, rm_test = _diff(groups, "mappo", "ppo", "rm", tests, 2)
    seeds = common_seeds(groups["mappo"], groups["ppo"])
    behind = [(s, groups["mappo"][s]["rm"][-1] - groups["ppo"][s]["rm"][-1]) for s in seeds
              if groups["mappo"][s]["rm"][-1] < groups["ppo"][s]["rm"][-1]]
    lengths = {arm: statistics.fmean(_finals(groups, arm, "length", seeds)) for arm in ("ppo", "mappo")}
    gold_diffs = [a - b for a, b in zip(_finals(groups, "mappo", "gold", seeds), _finals(groups, "ppo", "gold", seeds))]
    new = mean_estimate(gold_diffs)
    others = model_seed_comparisons(summaries).get(("ppo", "mappo"), {}).get("gold")
    elsewhere = ""
    if others:
        elsewhere = "; on SFT + RM seeds " + ", ".join(
            f"{m}: {p.diff.mean:+.3f} ({p.ahead}/{p.diff.n})" for m, p in zip(others.model_seeds, others.per_model_seed)
            if m != TASKS["long"].model_seed)
    return (f"- **At the paper's λ = 0.95, MA-PPO n = 5 beats token PPO on gold on {gold_ahead} of {n} seeds of one SFT + RM "
            f"seed ({TASKS['long'].model_seed}; {_failed(groups, ('ppo', 'mappo'), seeds)}){elsewhere}**: on seed "
            f"{TASKS['long'].model_seed} {gold} (Holm p {format_p(gold_test.p_holm)}, family \"{gold_test.family}\"), a new "
            f"PPO seed's difference predicted in [{new.new_low:.3f}, {new.new_high:.3f}]. On the RM score it is ahead on "
            f"{rm_ahead} of {n} seeds, and the mean difference {rm} (Holm p {format_p(rm_test.p_holm)}) is pulled down by "
            + ", ".join(f"seed {s} ({d:+.2f})" for s, d in behind)
            + f". Final responses are about as long: {lengths['ppo']:.1f} tokens (PPO) and {lengths['mappo']:.1f} "
            "(MA-PPO), seed means.")


def same_weight_bullet(groups, positions, tests) -> Optional[str]:
    """MA-PPO n = 5 at λ = 0.95 against token PPO at λ = 0.99 (the λ^(d/n) equivalent): equivalent on what?"""
    if not {"mappo", "ppo-lam0.99"} <= set(groups):
        return None
    gold, _, n, gold_test = _diff(groups, "mappo", "ppo-lam0.99", "gold", tests)
    rm, rm_ahead, _, rm_test = _diff(groups, "mappo", "ppo-lam0.99", "rm", tests)
    gold_tost, rm_tost = gold_test.equivalence, rm_test.equivalence
    seeds = common_seeds(groups["mappo"], groups["ppo-lam0.99"])
    length = [statistics.fmean(_finals(groups, arm, "length", seeds)) for arm in ("mappo", "ppo-lam0.99")]
    text = (f"- **MA-PPO n = 5 (λ = 0.95) is not token PPO at λ = 0.99.** With γ = 1 and a terminal reward, n-token "
            f"macros at λ weight a token d tokens before the end by λ^(d/n), so n = 5 at λ = 0.95 weights the opening "
            f"as token PPO does at 0.95^(1/5) = {0.95 ** 0.2:.3f} (§3.2.3; arithmetic). Measured on {n} paired seeds "
            f"({_failed(groups, ('mappo', 'ppo-lam0.99'), seeds)}): "
            f"gold {gold} ({'equivalent' if gold_tost.equivalent else 'not shown equivalent'} within "
            f"±{gold_tost.margin:g}: 90% CI [{gold_tost.low:.4f}, {gold_tost.high:.4f}]), RM {rm} "
            f"({rm_ahead}/{n} ahead; {'equivalent' if rm_tost.equivalent else 'not shown equivalent'} within "
            f"±{rm_tost.margin:g}), final length {length[0]:.1f} vs {length[1]:.1f} tokens")
    arms = position_groups(positions, seed_split(groups)[1])
    if {"mappo", "ppo-lam0.99"} <= set(arms):
        opening = {arm: {r["seed"]: r["opening"] for r in arms[arm]} for arm in ("mappo", "ppo-lam0.99")}
        shared = sorted(set(opening["mappo"]) & set(opening["ppo-lam0.99"]))
        diff = mean_estimate([opening["mappo"][s] - opening["ppo-lam0.99"][s] for s in shared])
        text += f", opening-sentence sentiment {diff.text()}"
    return text + "."


def same_lambda_bullet(groups, tests) -> Optional[str]:
    """The macro beyond λ: MA-PPO against token PPO at the same λ on the confirmation's seeds."""
    _, confirmation = seed_split(groups)
    pairs = [(arm, base) for arm, base in (("mappo-lam1", "ppo-lam1"), ("mappo-lam0.99", "ppo-lam0.99"),
                                           ("mappo-entropy-lam1", "ppo-lam1"),
                                           ("mappo-entropy-lam0.99", "ppo-lam0.99"))
             if {arm, base} <= set(groups)
             and len([s for s in common_seeds(groups[arm], groups[base]) if s in confirmation]) >= 2]
    if not pairs or pairs == [("mappo-lam1", "ppo-lam1")]:
        return None  # the one pair is the verdict's comparison
    parts = []
    for arm, base in pairs:
        seeds = [s for s in common_seeds(groups[arm], groups[base]) if s in confirmation]
        cells = []
        for metric in ("gold", "rm"):
            diffs = [a - b for a, b in zip(_finals(groups, arm, metric, seeds), _finals(groups, base, metric, seeds))]
            test = adjusted_test(tests, "long", arm, base, metric, seeds)
            cells.append(f"{metric} {mean_estimate(diffs).text()} ({sum(d > 0 for d in diffs)}/{len(diffs)}, "
                         f"{_failed(groups, (arm, base), seeds)}; "
                         f"{reading(test.equivalence.mean, test.p_holm, test.equivalence, 'MA-PPO', 'token PPO')})")
        parts.append(f"{arm} − {base} at λ = {arm_lambda(arm):g} (family \"{test.family}\"): " + ", ".join(cells))
    return (f"- **At the same λ, on the fresh seeds** (SFT + RM seed {TASKS['long'].model_seed}; differences and "
            "equivalences Holm-adjusted within each test's family, report \"Families of tests\"): "
            + "; ".join(parts) + ". At λ = 1 neither method discounts the terminal reward along the response, so "
            "what is left between them is the macro itself (its value estimates and its per-macro update).")


def added_model_seeds(summaries, gold, meta) -> List[int]:
    """The SFT + RM seeds of ``gold``'s pair trained at the commit that ``study_meta.json``'s plan of the pair names
    as fixing its seeds (added after the earlier ones had been read)."""
    plan = next((p for p in (meta or {}).get("plans", []) if len(p["tasks"]) > 1
                 and set(p.get("arms") or ()) == {gold.method, gold.baseline} and p["elements"].get("seeds")), None)
    tasks = {TASKS[t].model_seed: t for t in plan["tasks"]} if plan else {}
    return [m for m in gold.model_seeds if m in tasks and all(r.get("commit", "").startswith(plan["elements"]["seeds"])
                                                             for r in summaries if r["task"] == tasks[m]
                                                             and r["arm"] in (gold.method, gold.baseline))]


def model_seed_bullet(summaries, tests, meta=None) -> Optional[str]:
    """The pairs of ``MODEL_SEED_PAIRS`` on every SFT + RM seed, with the interval that covers the model seed."""
    found = model_seed_comparisons(summaries)
    if not found:
        return None
    parts, gold_readings = [], []
    for pair, metrics in found.items():
        cells = []
        for metric, c in metrics.items():
            digits = 3 if metric == "gold" else 2
            per_seed = ", ".join(f"seed {model_seed} {p.diff.mean:+.{digits}f} ({p.ahead}/{p.diff.n})"
                                 for model_seed, p in zip(c.model_seeds, c.per_model_seed))
            test = tests["model seeds", pair, metric]
            reading_text = reading(c.across.mean, test.p_holm, test.equivalence, "MA-PPO", "token PPO")
            if metric == "gold":
                gold_readings.append(reading_text)
            cells.append(f"{metric} {c.across.mean:.{digits}f} [{c.across.low:.{digits}f}, "
                         f"{c.across.high:.{digits}f}] ({reading_text}; {per_seed})")
        gold = metrics["gold"]
        failed = [f"SFT + RM seed {m}: {run['arm']} seed {run['seed']} ({why}; final RM {run['rm'][-1]:.2f}, gold "
                  f"{run['gold'][-1]:.3f})" for m, run, why in model_seed_failures(summaries, gold)]
        spread, wild = within_spread(summaries, gold)
        kept = [i for i in range(len(spread)) if i != wild]
        values = model_seed_values(summaries, gold)[f"{gold.method} − {gold.baseline}"]
        without = scipy_stats.f_oneway(*(values[i] for i in kept)).pvalue if wild is not None else math.nan
        own = own_family(metrics)
        parts.append(f"{gold.method} − {gold.baseline} at λ = {arm_lambda(gold.method):g} on SFT + RM seeds "
                     f"{', '.join(map(str, gold.model_seeds))} ({len(gold.seeds[0])} PPO seeds each"
                     f"{few_df(len(gold.model_seeds) - 1)}; failed runs: {'; '.join(failed) or 'none'}): "
                     + ", ".join(cells) + f"; that the model seeds' mean gold differences are equal: Kruskal-Wallis "
                     f"rank test p {format_p(gold.across.p_rank)}, one-way ANOVA p {format_p(gold.across.p_differ)}"
                     + (f" — the ANOVA is moved by SFT + RM seed {gold.model_seeds[wild]}'s within-seed standard "
                        f"deviation {spread[wild]:.3f} (the others {min(spread[i] for i in kept):.3f}-"
                        f"{max(spread[i] for i in kept):.3f}); without that seed, ANOVA p {format_p(without)}"
                        if wild is not None else "")
                     + f"; in the pair's own family of its two tests (instead of the {2 * len(found)}-test family "
                     f"\"across SFT + RM seeds\", set after the 3-seed data), Holm-adjusted TOST p gold "
                     f"{format_p(own['gold'].equivalence.p)}, RM {format_p(own['rm'].equivalence.p)}"
                     + (" — equivalent there" if own["gold"].equivalence.equivalent else ""))
    golds = [metrics["gold"] for metrics in found.values()]
    leads = []
    for gold, text in zip(golds, gold_readings):
        added = added_model_seeds(summaries, gold, meta)
        read = [m for m in gold.model_seeds if m not in added]
        notes = [f"{', '.join(map(str, added))} added after " + (f"SFT + RM seed {read[0]}'s runs" if len(read) == 1
                                                                 else f"the first {len(read)} seeds' runs")
                 + " had been read" if added else "", few_df(len(gold.model_seeds) - 1)[2:-1]]
        lead = (f"{gold.method} − {gold.baseline} (λ = {arm_lambda(gold.method):g}) on {len(gold.model_seeds)} SFT + RM "
                "seeds" + (f" ({'; '.join(filter(None, notes))})" if any(notes) else "")
                + f": gold {gold.across.mean:+.3f} [{gold.across.low:.3f}, "
                f"{gold.across.high:.3f}], " + ("not decided" if text.startswith("undecided") else text))
        if (gold.baseline, gold.method) == tuple(MODEL_SEED_PAIRS["long"][0]):
            own = own_family(found[tuple(MODEL_SEED_PAIRS["long"][0])])["gold"]
            if own.equivalence.equivalent:
                lead += (f" in the {2 * len(found)}-test family chosen after the 3-seed data, equivalent within "
                         f"±{own.equivalence.margin:g} in the pair's own 2-test family (TOST p {format_p(own.equivalence.p)}; "
                         f"neither family was committed before the runs: both readings are post hoc, exploratory)")
            new = new_model_seed_interval(model_seed_values(summaries, gold)[f"{gold.method} − {gold.baseline}"])
            lead += (f"; on a new SFT + RM seed its mean over {len(gold.seeds[0])} PPO seeds is predicted in "
                     f"[{new.mean_low:.3f}, {new.mean_high:.3f}]")
        leads.append(lead)
    headline = "; ".join(leads)
    if all(gold.across.p_rank < ALPHA for gold in golds):
        headline += (f"; the SFT + RM seed changes the gap (rank test p < 0.05 for every pair, raw, in no family): the "
                     f"bullets above rest on SFT + RM seed {TASKS['long'].model_seed} alone")
    return (f"- **{headline}.** Final score; the interval is Student's t over the model seeds' means, so it covers the "
            "SFT + RM seed as well as the PPO seed (and the machine kinds the SFT + RM seeds were made on: report, "
            "\"Two pairs on several SFT + RM seeds\"); differences and equivalences Holm-adjusted over these "
            "comparisons (family \"across SFT + RM seeds\"); exploratory (report, \"Pre-registration, checked\"). "
            "RM differences are each SFT + RM seed's own reward model's scale, averaged against one margin set on "
            f"seed {TASKS['long'].model_seed}'s. " + "; ".join(parts) + ".")


def machine_bullet(summaries, reruns, meta=None, async_runs=()) -> Optional[str]:
    """The machine component of the λ = 1 pair, said as what it measured and what it cannot show: its seeds
    rerun on another machine kind (with the SFT and reward model trained again there), and the SFT + RM seeds made
    there against intervals estimated without them."""
    pair = MODEL_SEED_PAIRS["long"][0]
    committed = {(s["task"], s["arm"], s["seed"]): s for s in summaries}
    again = [(committed[r["task"], r["arm"], r["seed"]], r) for r in reruns
             if (r["task"], r["arm"], r["seed"]) in committed and r["arm"] in pair]
    checks = new_machine_checks(summaries, meta)
    if not again and not checks:
        return None
    leads, parts = [], []
    if again:
        inside = 0
        for arm in pair:
            published = published_new_seed(summaries, "long", arm)
            inside += sum(published[0] <= r["gold"][-1] <= published[1] for c, r in again if c["arm"] == arm)
        same = sum(any(bits_equal(r, k) and (k["arm"], k["seed"]) == (r["arm"], r["seed"]) for k in async_runs
                       if not k.get("async_rollout")) for _, r in again)
        code = commits_text(r for _, r in again) != commits_text(c for c, _ in again)
        leads.append(f"{len(again)} same-seed reruns on another machine kind (by their bits)"
                     + (" at another commit" if code else "") + ", with the SFT and reward model trained again there: "
                     f"{inside} of {len(again)} land inside their arm's published new-seed interval; "
                     f"{sum(bool(failure(r)) for _, r in again)} of them failed, against "
                     f"{sum(bool(failure(c)) for c, _ in again)} of the {len(again)} committed runs")
        parts.append(f"the reruns' step-0 RM {again[0][1]['rm'][0]:.3f} against the committed "
                     f"{again[0][0]['rm'][0]:.3f} (another SFT and reward model's bits)"
                     + (f", and another code version (reruns at {commits_text(r for _, r in again)}, committed runs at "
                        f"{commits_text(c for c, _ in again)})" if code else "")
                     + ": machine, models" + (" and code" if code else "") + " are confounded; the pair's per-seed "
                     "differences are derived from the same runs, no further evidence"
                     + (f"; {same} of the {len(again)} reruns equal, bit for bit, the K = 0 runs of the asynchronous-rollout "
                        f"check (trained at {commits_text(k for k in async_runs if not k.get('async_rollout'))} with another "
                        f"thread count, in the repository before the reruns were filed), so they are not a further draw, and "
                        f"the code change they rule out is only the one after that commit" if same else ""))
    for check in checks:
        arms = [(name, v) for name, v in check.values.items() if name in pair]
        marks = {name: [(f.run_low <= x <= f.run_high, bad) for x, bad in zip(values, flags)]
                 for name, (f, values, _, flags) in check.values.items()}  # (inside, failed) per run
        of_arms = [m for name, _ in arms for m in marks[name]]
        runs, inside = len(of_arms), sum(i for i, _ in of_arms)
        failed, failed_inside = sum(b for _, b in of_arms), sum(i and b for i, b in of_arms)
        diffs = [m for name, runs_of in marks.items() if name not in pair for m in runs_of]
        diff_n, diff_inside, diff_out_failed = len(diffs), sum(i for i, _ in diffs), sum(b and not i for i, b in diffs)
        leads.append(f"on SFT + RM seeds {', '.join(map(str, check.checked))} (made there), {inside} of {runs} runs land "
                     f"inside the intervals of a new SFT + RM seed, estimated from {len(check.estimated)} SFT + RM "
                     f"seeds{few_df(len(check.estimated) - 1)} and wide enough to hold {failed_inside} of the {failed} failed "
                     f"runs, and {diff_inside} of {diff_n} of the pair's per-seed differences land inside theirs (of the "
                     f"{diff_n - diff_inside} outside, {diff_out_failed} are on a seed where a run failed)")
        parts.append(f"SFT + RM seeds {', '.join(map(str, check.checked))}: " + "; ".join(
            f"{name} one run [{fitted.run_low:.3f}, {fitted.run_high:.3f}]" for name, (fitted, _, _, _) in arms))
    return (f"- **The machine component (the λ = 1 pair; exploratory by the check), what was measured: "
            f"{'; '.join(leads)}. Neither check can show that the machine kind moves nothing.** Final gold; report, "
            f"\"The machine component\"; exploratory (\"Pre-registration, checked\"). " + "; ".join(parts) + ".")


def n_sweep_bullet(groups, tests) -> Optional[str]:
    """MA-PPO's other termination settings against n = 5 at λ = 0.95 on gold, with equivalence: the TOST p raw and
    after Holm within its family (set after the data; the report lists its tests)."""
    arms = [a for a in ("mappo-n3", "mappo-n10", "mappo-ninf", "mappo-entropy") if a in groups]
    if "mappo" not in groups or not arms:
        return None
    parts = []
    for arm in arms:
        gold, ahead, n, test = _diff(groups, arm, "mappo", "gold", tests)
        seeds = common_seeds(groups[arm], groups["mappo"])
        raw = tost([a - b for a, b in zip(_finals(groups, arm, "gold", seeds), _finals(groups, "mappo", "gold", seeds))],
                   EQUIVALENCE_MARGINS["gold"]).p
        parts.append(f"{arm} {gold} ({_failed(groups, (arm, 'mappo'), seeds)}; "
                     f"{'equivalent' if test.equivalence.equivalent else 'not shown equivalent'}: "
                     f"TOST p {format_p(raw)} raw, {format_p(test.equivalence.p)} after Holm)")
    size = sum(u.family == test.family for u in tests.values())
    return ("- **MA-PPO's termination settings at λ = 0.95, gold against n = 5** (paired, equivalence within "
            f"±{EQUIVALENCE_MARGINS['gold']:g}; Holm within the {size}-test family \"{test.family}\", "
            "set after these data had been seen, so a reading that rests on it — a raw TOST p below 0.05 that Holm "
            "lifts above — is post hoc; the report, \"Families of tests\", lists its tests): " + "; ".join(parts) + ".")


def positions_bullet(groups, positions) -> Optional[str]:
    """Where the responses changed: the opening sentence's sentiment per policy (exploration runs)."""
    arms = position_groups(positions, seed_split(groups)[1])
    shown = [a for a in ("sft", "ppo", "ppo-lam0.99", "ppo-lam1", "mappo", "mappo-entropy") if a in arms]
    if len(shown) < 3:
        return None
    cells = []
    for arm in shown:
        values = [r["opening"] for r in arms[arm]]
        cells.append(f"{arm} {mean_estimate(values).text() if len(values) > 1 else f'{values[0]:.3f}'}")
    return ("- **Where the responses changed** (final actors, one sample per held-out prompt; report, positions "
            "table): the opening sentence's sentiment — the decision 100+ tokens before the reward — "
            + "; ".join(cells) + ".")


def failure_bullet(summaries) -> str:
    """Every failed run (:data:`evaluation.study.stats.FAILED_RULE`) of every task of ``runs.jsonl``, by arm."""
    parts, total = [], 0
    for task in dict.fromkeys(s["task"] for s in summaries):
        groups = by_arm(summaries, task)
        for arm, runs in failures(groups).items():
            finals = {s: groups[arm][s]["gold"][-1] for s in groups[arm]}
            ranked = sorted(finals, key=finals.get, reverse=True)
            total += len(runs)
            parts.append(f"{task}/{arm} {len(runs)} of {len(groups[arm])} (" + "; ".join(
                f"seed {seed}: {why}, final RM {groups[arm][seed]['rm'][-1]:.2f} from {groups[arm][seed]['rm'][0]:.2f}, "
                f"gold {finals[seed]:.3f} from {groups[arm][seed]['gold'][0]:.3f} (rank {ranked.index(seed) + 1} of "
                f"{len(ranked)} in its arm), length {groups[arm][seed]['length'][-1]:.0f}" for seed, why in runs.items())
                         + ")")
    where = {}
    for part in parts:
        task = part.split("/")[0]
        where.setdefault("Failed runs" if task in ("short", "long") else "Two pairs on several SFT + RM seeds",
                         {})[task] = None
    listed = "; ".join(f"{', '.join(tasks)} under \"{section}\"" for section, tasks in where.items())
    return (f"- **{total} of {len(summaries)} runs failed** ({FAILED_RULE}; every one listed in the report ({listed}) "
            "and counted wherever runs are counted; they stay in every figure): " + "; ".join(parts)
            + ". A collapsed run can still score well on gold: length alone moves it (next point).")


def length_bullet(groups, positions) -> Optional[str]:
    arms = position_groups(positions, seed_split(groups)[1])
    chosen = arms.get("chosen")
    if not chosen:
        return None
    c = chosen[0]
    text = (f"- **Length moves the gold score on this task**: it is the share of sentiment words, and the opening "
            f"sentences carry more of them, so the held-out chosen responses score {c['gold']:.3f} whole and "
            f"{c['gold_first3']:.3f} on their first three sentences.")
    measured = {arm: [r for r in rows if "gold" in r] for arm, rows in arms.items() if arm not in ("chosen", "sft")}
    measured = {arm: rows for arm, rows in measured.items() if len(rows) > 1}
    if measured:
        text += " Final actors, whole-response gold → gold of the first 10 sentences (seed means): " + "; ".join(
            f"{arm} {statistics.fmean(r['gold'] for r in rows):.3f} → {statistics.fmean(r['gold_first10'] for r in rows):.3f}"
            f" ({len(rows)} runs)" for arm, rows in measured.items()) + " (report, \"Gold with and without length's share\")."
    lowest = []
    for arm in ("ppo", "ppo-lam0.98", "ppo-lam0.99", "ppo-lam1"):
        if arm in groups:
            seeds = common_seeds(groups[arm])
            curve = [statistics.fmean(groups[arm][s]["length"][i] for s in seeds)
                     for i in range(len(groups[arm][seeds[0]]["length"]))]
            low = min(range(1, len(curve)), key=curve.__getitem__)
            lowest.append(f"{curve[low]:.0f} at λ = {arm_lambda(arm):g} (step {groups[arm][seeds[0]]['steps'][low]})")
    if lowest:
        text += (" Token PPO's seed-mean eval length dips lowest with the shortest credit horizon: " + ", ".join(lowest)
                 + f", from {statistics.fmean(r['length'][0] for r in groups['ppo'].values()):.0f} at step 0.")
    return text


def plateau_bullet(groups) -> str:
    exploration, _ = seed_split(groups)
    arms = [a for a in groups if set(exploration) <= set(groups[a])]
    rows = {arm: plateau({arm: {s: groups[arm][s] for s in exploration}}, arm) for arm in arms}
    still = [arm for arm, (late, _) in rows.items() if late.t_low > 0]
    shares = [share for arm, (_, share) in rows.items() if arm in still]
    tau, count = ordering_agreement({arm: {s: groups[arm][s] for s in exploration} for arm in arms})
    stops = parity_by_stop(groups, "ppo", "mappo", (32, 40, 48))
    steps = groups["ppo"][exploration[0]]["steps"][-1]
    return (f"- **\"Final\" is where training stopped, not a plateau**: on seeds {_seed_range(exploration)}, {len(still)} "
            f"of {len(arms)} long-task arms' gold still rises over the last quarter of their {steps} iterations (t CI "
            f"above 0; {min(shares):.0%}–{max(shares):.0%} of their whole rise). Ordering the arms by final gold and by "
            f"gold AUC agrees only partly (Kendall τ = {tau:.2f} over {count} arms), and MA-PPO's gold parity against "
            "PPO depends on the stopping step: " + ", ".join(f"{r.speedup:.2f}× at step {s}" for s, r in stops.items()
                                                            if r.speedup)
            + ". Every comparison here is at the stopping step.")


def short_bullet(summaries, tests) -> Optional[str]:
    groups = by_arm(summaries, "short")
    if not {"ppo", "mappo", "mappo-entropy"} <= set(groups):
        return None
    parts = []
    for arm in ("mappo", "mappo-entropy"):
        gold, ahead, n, test = _diff(groups, arm, "ppo", "gold", tests, task="short")
        parts.append(f"{arm} − PPO gold {gold} ({ahead}/{n}, "
                     f"{_failed(groups, (arm, 'ppo'), common_seeds(groups[arm], groups['ppo']))}, Holm p "
                     f"{format_p(test.p_holm)}; {'equivalent' if test.equivalence.equivalent else 'not shown equivalent'} "
                     f"within ±{test.equivalence.margin:g})")
    return "- **Short task (~16 tokens): no difference shown.** " + "; ".join(parts) + "."


def scope_bullet(summaries, positions, measured_machine: bool = False) -> str:
    noise = sampling_noise(positions)
    measured = ""
    if noise:
        measured = (" Gold's standard deviation across sampling seeds against across PPO seeds, " + "; ".join(
                        f"{arm} {within:.4f} vs {between:.4f} ({actors} actors × {draws} sampling seeds)"
                        for arm, (actors, draws, within, between) in noise.items())
                    + (": the evaluation sample is the smaller source here." if all(
                        within < between for _, _, within, between in noise.values()) else "."))
    by_draw = sampling_seed_comparison(positions)
    if by_draw:
        measured += " " + sampling_seed_text(by_draw, positions_against_runs(positions, summaries))
    unrecorded = sum(not s.get("machine") for s in summaries)
    if unrecorded:
        measured += f" {unrecorded} of {len(summaries)} runs do not record their machine (report, \"Machines\")" + (
            "; every interval over the PPO seeds of one SFT + RM seed is estimated on one machine kind and contains no "
            "machine component; the machine component is measured beside them (the previous point)." if measured_machine
            else "; every interval is estimated on the study's machines only and contains no machine component.")
    not_run = ("the other arms on further SFT + RM seeds" if model_seed_comparisons(summaries) else
               "a second and third SFT + RM seed for the core comparison")
    return ("- **What the intervals cover.** " + VARIATION_COVERED + measured + f" Not run: {not_run}, and sampling "
            "seeds for the exploration's actors (report, \"What was not run\").")


def findings_by_name(summaries: Sequence[dict], positions: Sequence[dict], reruns: Sequence[dict] = (),
                     meta: Optional[dict] = None) -> Dict[str, str]:
    """The study page's bullets by name, in order (those the data has)."""
    groups = by_arm(summaries, "long")
    tests = multiplicity(summaries)
    machine = machine_bullet(summaries, reruns, meta, read_jsonl(ROOT / "docs" / ASYNC_RUNS))
    bullets = {"verdict": verdict_bullet(groups, tests),
               "same λ": same_lambda_bullet(groups, tests) if MAPPO_LAMBDA_ARMS else None,
               "paper's λ": paper_lambda_bullet(groups, summaries, tests),
               "SFT + RM seeds": model_seed_bullet(summaries, tests, meta),
               "same weight": same_weight_bullet(groups, positions, tests), "n sweep": n_sweep_bullet(groups, tests),
               "positions": positions_bullet(groups, positions), "failed runs": failure_bullet(summaries),
               "length": length_bullet(groups, positions), "plateau": plateau_bullet(groups),
               "short task": short_bullet(summaries, tests),
               "machine": machine, "scope": scope_bullet(summaries, positions, bool(machine))}
    return {name: bullet for name, bullet in bullets.items() if bullet}


def readme_findings(summaries: Sequence[dict], positions: Sequence[dict], reruns: Sequence[dict] = (),
                    meta: Optional[dict] = None) -> List[str]:
    """The study page's bullets, in order."""
    return list(findings_by_name(summaries, positions, reruns, meta).values())


HEADLINE = ("verdict", "paper's λ", "SFT + RM seeds", "machine")
"""The bullets whose bold leads are the README's study headline, in this order."""


def headline(summaries: Sequence[dict], positions: Sequence[dict], reruns: Sequence[dict] = (),
             meta: Optional[dict] = None) -> List[str]:
    """The README's headline lines: the bold lead of each bullet :data:`HEADLINE` names."""
    found = findings_by_name(summaries, positions, reruns, meta)
    leads = [re.match(r"- \*\*(.+?)\*\*", found[name]).group(1) for name in HEADLINE if name in found]
    return [f"- **{lead}**" + ("" if lead.endswith(".") else ".") for lead in leads]


HEADLINE_MARKER = "<!-- study headline: each bold sentence is the lead of a finding evaluation.study_findings writes -->"


def rewrite_headline(text: str, summaries: Sequence[dict], positions: Sequence[dict], reruns: Sequence[dict] = (),
                     meta: Optional[dict] = None) -> str:
    """The README with the bullets under :data:`HEADLINE_MARKER` replaced by :func:`headline`'s."""
    lines = text.split("\n")
    return "\n".join(_replace_run(lines, lambda line: line == HEADLINE_MARKER,
                                  lambda line: line == HEADLINE_MARKER or line.startswith("- **"),
                                  [HEADLINE_MARKER, *headline(summaries, positions, reruns, meta)]))


README_SECTION = "## What the study shows"


def _replace_run(lines: List[str], is_first, is_part, new: Sequence[str]) -> List[str]:
    """``lines`` with the run of lines that starts at the first ``is_first`` line and goes on while ``is_part``
    replaced by ``new``."""
    start = next(i for i, line in enumerate(lines) if is_first(line))
    end = start
    while end < len(lines) and is_part(lines[end]):
        end += 1
    return lines[:start] + list(new) + lines[end:]


def rewrite_readme(text: str, summaries: Sequence[dict], positions: Sequence[dict], reruns: Sequence[dict] = (),
                   meta: Optional[dict] = None) -> str:
    """The README with its study section's two tables and its bullets replaced by those generated from the runs
    (the prose around them is left as it is)."""
    lines = text.split("\n")
    start = lines.index(README_SECTION)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = lines[start:end]
    for header, new in (("| task | arm | seeds |", readme_table(summaries)),
                        ("| arm | seeds | final gold", confirmation_table(summaries))):
        section = _replace_run(section, lambda line, header=header: line.startswith(header),
                               lambda line: line.startswith("|"), new)
    section = _replace_run(section, lambda line: line.startswith("- **"), lambda line: line.startswith("- **"),
                           readme_findings(summaries, positions, reruns, meta))
    return "\n".join(lines[:start] + section + lines[end:])


def main(argv=None) -> None:
    parser = ArgumentParser(description="Print the README's study bullets from the committed summaries.")
    parser.add_argument("runs_jsonl", type=Path, help="docs/study/runs.jsonl (positions.jsonl, machine_reruns.jsonl "
                                                      "and study_meta.json are read beside it)")
    parser.add_argument("--readme", type=Path, default=None,
                        help=f"rewrite this page's tables and bullets under '{README_SECTION}' instead of printing")
    parser.add_argument("--headline", type=Path, default=None,
                        help="rewrite this README's study headline (the bullets under its 'study headline' comment) "
                             "from the same bullets' bold leads")
    args = parser.parse_args(argv)
    if not args.runs_jsonl.is_file():
        parser.exit(2, f"error: {args.runs_jsonl}: no such file\n")
    here = args.runs_jsonl.parent
    summaries, positions, reruns = (read_jsonl(path) for path in (args.runs_jsonl, here / "positions.jsonl",
                                                                  here / RERUNS))
    meta = json.loads((here / "study_meta.json").read_text()) if (here / "study_meta.json").is_file() else None
    if args.readme is None and args.headline is None:
        print("\n".join(readme_findings(summaries, positions, reruns, meta)))
        return
    if args.readme is not None:
        if not args.readme.is_file() or README_SECTION not in args.readme.read_text().split("\n"):
            parser.exit(2, f"error: {args.readme}: expected a page with a '{README_SECTION}' section\n")
        args.readme.write_text(rewrite_readme(args.readme.read_text(), summaries, positions, reruns, meta))
    if args.headline is not None:
        if not args.headline.is_file() or HEADLINE_MARKER not in args.headline.read_text().split("\n"):
            parser.exit(2, f"error: {args.headline}: expected a README with the line '{HEADLINE_MARKER}'\n")
        args.headline.write_text(rewrite_headline(args.headline.read_text(), summaries, positions, reruns, meta))
