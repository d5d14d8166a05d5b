"""The study report's sections as Markdown lines: per-arm tables against a baseline, the sweeps, the verdict and its
sensitivity, the confirmation, the SFT + RM seeds, the families of tests, collapses, convergence, stopping, what
was not run, and the README's two tables. Each function takes the summaries (or their groups and the adjusted
tests) and returns lines; the numbers come from :mod:`evaluation.study.decisions` and :mod:`evaluation.study.stats`."""
from __future__ import annotations

import statistics
from collections import Counter
from typing import Dict, List, Sequence

from scipy import stats as scipy_stats

from evaluation.study.decisions import (TestKey, Verdict, adjusted_test, bits_equal, collapse_sensitivity,
                                        comparison_families, confirmation_pairs, confirmation_verdicts,
                                        model_seed_comparisons, model_seed_failures,
                                        model_seed_values, model_seeds_by_machine, multiplicity, new_machine_checks,
                                        own_family, plateau, published_new_seed, reading, rerun_pairs,
                                        unseen_seeds, within_spread)
from evaluation.study.design import (ARMS, CONFIRMATION_TIERS, EQUIVALENCE_MARGINS, MARGIN_RULE, METRICS,
                                     MODEL_SEED_PAIRS, README_ARMS, TASKS, confirmation_seeds, model_seed_tasks)
from evaluation.study.stats import (ALPHA, AdjustedTest, COLLAPSE_FRACTION, FAILED_RULE, Paired, ParityResult,
                                    area_under_curve, collapse, failure, few_df, format_p, last_quarter_change,
                                    across_model_seeds, mean_estimate, new_model_seed_interval,
                                    paired_difference, parity, resample_indices,
                                    seeds_for_equivalence, t_interval)
from evaluation.study.summaries import (by_arm, common_seeds, failed_cell, failures, machine_name,
                                        mappo_family, seed_split)


def _seed_text(seeds: Sequence[int]) -> str:
    """Seeds as ranges: 9-12, 14."""
    parts, start = [], None
    for i, seed in enumerate(seeds):
        if start is None:
            start = seed
        if i + 1 == len(seeds) or seeds[i + 1] != seed + 1:
            parts.append(f"{start}-{seed}" if seed != start else f"{seed}")
            start = None
    return "seeds " + ", ".join(parts)


def arm_row(runs: Dict[int, dict], base: Dict[int, dict], seeds: Sequence[int], metric: str) -> dict:
    """Final score, AUC, the change over the last quarter, and against the baseline (same seeds) the paired
    differences and parity."""
    steps = runs[seeds[0]]["steps"]
    method = [runs[s][metric] for s in seeds]
    finals = [c[-1] for c in method]
    aucs = [area_under_curve(steps, c) for c in method]
    indices = resample_indices(len(seeds))
    row = {"n": len(seeds), "final": mean_estimate(finals, indices), "auc": mean_estimate(aucs, indices),
           "late": mean_estimate([last_quarter_change(steps, c) for c in method], indices)}
    if base is not runs:
        baseline = [base[s][metric] for s in seeds]
        row["final_diff"] = paired_difference([c[-1] for c in baseline], finals, indices)
        row["auc_diff"] = paired_difference([area_under_curve(steps, c) for c in baseline], aucs, indices)
        row["parity"] = parity(steps, baseline, method)
    return row


def format_parity(p: ParityResult) -> str:
    return "never" if p.method_step is None else "n/a" if p.speedup is None else f"{p.speedup:.2f}x"


def format_paired(paired: Paired) -> str:
    return f"{paired.diff.cells()} | {paired.ahead}/{paired.diff.n}"


def table(summaries: Sequence[dict], task: str, baseline: str, arms: Sequence[str], title: str) -> List[str]:
    """Markdown rows: per arm and metric, the final score (mean, t CI, bootstrap CI, new-seed prediction
    interval), the paired difference to ``baseline`` (same four, seeds ahead), the AUC difference and parity,
    and the change over the last quarter."""
    groups = by_arm(summaries, task)
    if baseline not in groups:
        return []
    lines = [f"#### {title}", "",
             f"| arm | seeds | metric | final | t CI | bootstrap CI | new seed | final − {baseline} | t CI | bootstrap "
             f"CI | new seed | ahead | AUC − {baseline} [t CI] | parity speed-up | last-quarter change [t CI] |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        if arm not in groups:
            continue
        seeds = common_seeds(groups[baseline], groups[arm])
        if not seeds:
            lines.append(f"| {arm} | 0 | — | no seed shared with {baseline} |" + " |" * 11)
            continue
        for metric in METRICS:
            row = arm_row(groups[arm], groups[baseline] if arm != baseline else groups[arm], seeds, metric)
            if "final_diff" in row:
                diff, auc, par = (format_paired(row["final_diff"]), row["auc_diff"].diff.text(),
                                  format_parity(row["parity"]))
            else:
                diff, auc, par = "— | | | | ", "—", "—"
            lines.append(f"| {arm} | {row['n']} | {metric} | {row['final'].cells()} | {diff} | {auc} | {par} | "
                         f"{row['late'].text()} |")
    return lines + [""]


def _chosen(v: Verdict) -> str:
    """Each fold: the arms chosen on one half of the seeds, compared on the other."""
    return "; ".join(f"chosen on {_seed_text(f.select_seeds)[6:]}, compared on {_seed_text(f.test_seeds)[6:]}: "
                     f"{f.best_b} vs {f.best_a}" for f in v.folds)


def verdict_rows(found: Dict[str, Verdict], tests: Dict[TestKey, AdjustedTest], procedure: str) -> List[str]:
    rows = []
    for metric, v in found.items():
        test = tests["verdict", procedure, metric]
        chosen = _chosen(v)
        rows.append(f"| {metric} | {chosen} | {v.diff.text()} | {v.ahead}/{v.diff.n} | {format_p(v.p)} | "
                    f"{format_p(test.p_holm)} | {test.equivalence.text()} | "
                    f"{reading(v.diff.mean, test.p_holm, test.equivalence, 'MA-PPO', 'token PPO')} |")
    return rows


VERDICT_HEADER = ["| metric | chosen (by gold) on one half, compared on the other | MA-PPO best − token PPO best "
                  "[95% t CI] | ahead | p | Holm p | equivalence | reading |", "|---|---|---|---|---|---|---|---|"]


def verdict_lines(groups: Dict[str, Dict[int, dict]], tests: Dict[TestKey, AdjustedTest]) -> List[str]:
    exploration, confirmation = seed_split(groups)
    best, confirmed = confirmation_verdicts(groups)
    if not confirmed:
        return []
    lines = ["#### The verdict: MA-PPO's best against token PPO's best, each chosen on other seeds", "",
             "Equivalence margin Δ: " + MARGIN_RULE + ". p: two-sided paired t test; Holm p and the TOST p: "
             "Holm-adjusted within the test's family (\"Families of tests\": each verdict's two metrics are a family "
             "of their own); equivalence: two one-sided tests at 5%.", ""]
    if confirmed:  # the exploration's own best-against-best is not run: its margin was derived from its seeds
        v = confirmed["gold"]
        commits = Counter(groups[arm][seed]["commit"] for arm in (best, *mappo_family(groups, v.seeds)) for seed in v.seeds)
        made = ", ".join(f"`{c}` ({n} runs)" for c, n in commits.items())
        lines += [f"**Confirmation** (fresh seeds {v.seeds[0]}-{v.seeds[-1]}, {len(v.seeds)} of them, trained at "
                  f"{len(commits)} commit{'s' if len(commits) > 1 else ''} — {made} — on a machine the runs do not "
                  f"record (\"Machines\"), after the margin and candidates were fixed; the selection procedure below "
                  f"was committed after the first of these runs had finished, and an interim result was published "
                  f"before the last: \"Order of decisions\"; exploratory by \"Pre-registration, checked\"): token PPO "
                  f"{best} (its best λ on the exploration seeds {exploration[0]}-{exploration[-1]}) against MA-PPO's "
                  f"best of {', '.join(dict.fromkeys(f.best_b for f in v.folds))} among "
                  f"{', '.join(mappo_family(groups, v.seeds))} (chosen on one half of the fresh seeds, compared on the "
                  f"other, both ways).", "", *VERDICT_HEADER, *verdict_rows(confirmed, tests, "confirmation"), "",
                  *sensitivity_lines(groups, tests)]
    return lines


def sensitivity_lines(groups: Dict[str, Dict[int, dict]], tests: Dict[TestKey, AdjustedTest]) -> List[str]:
    found = collapse_sensitivity(groups)
    if not found:
        return []
    best, confirmed = confirmation_verdicts(groups)
    primary = confirmed["gold"]
    ended = []
    for arm in (best, *mappo_family(groups, primary.seeds)):
        finals = {s: groups[arm][s]["gold"][-1] for s in primary.seeds}
        ranked = sorted(finals, key=finals.get, reverse=True)
        ended += [f"{arm} seed {s} ({failure(groups[arm][s])}; final length {groups[arm][s]['length'][-1]:.0f} "
                  f"tokens, gold rank {ranked.index(s) + 1} of {len(ranked)} in its arm)" for s in primary.seeds
                  if failure(groups[arm][s])]
    rows = []
    for name, v in found.items():
        test = tests["verdict", name, "gold"]
        chosen = _chosen(v)
        rows.append(f"| {name} | {len(v.seeds)} | {chosen} | {v.diff.text()} | {v.ahead}/{v.diff.n} | {format_p(v.p)} | "
                    f"{format_p(test.p_holm)} | {test.equivalence.text()} | "
                    f"{reading(v.diff.mean, test.p_holm, test.equivalence, 'MA-PPO', 'token PPO')} |")
    return [f"**Collapse sensitivity** (beside the primary gold row above, {primary.diff.text()}): gold rewards "
            f"collapse on this task (a short answer keeps the opening's sentiment words); failed runs of the compared "
            f"arms: {'; '.join(ended) or 'none'}. *Collapse-floored gold*: a run whose final eval length is below "
            f"{COLLAPSE_FRACTION:.0%} of its step-0 length scores its step-0 gold (no gain), and the whole procedure "
            "is run again; *seeds without a failed run*: the fresh seeds on which no run of the compared arms failed, "
            "halved again. Holm over these two (family \"collapse sensitivity\").", "",
            "| analysis | seeds | chosen (by gold) on one half, compared on the other | MA-PPO best − token PPO best "
            "[95% t CI] | ahead | p | Holm p | equivalence | reading |", "|---|---|---|---|---|---|---|---|---|", *rows, ""]


def confirmation_lines(summaries: Sequence[dict], meta=None) -> List[str]:
    """The confirmation's arms on the fresh seeds against token PPO's exploration-best λ."""
    table = confirmation_table(summaries)
    if not table:
        return []
    groups = by_arm(summaries, "long")
    step0 = [(groups[a][seeds[0]]["rm"][0], groups[a][seeds[0]]["gold"][0])
             for a, seeds in zip(("ppo", CONFIRMATION_TIERS["long"][0][0]), seed_split(groups))]
    return ["#### Confirmation: every arm on the fresh seeds against token PPO at its exploration-best λ", "",
            "Evaluated every 12 iterations (`CONFIRMATION_FLAGS`; the evaluations at 12, 24, 36 and 48 equal an "
            "every-4 run's), so a collapse between evaluations can go unseen here. Holm p over this table's "
            "comparisons (both metrics). The confirmation ran on another machine than the exploration, and its bits "
            "differ: the step-0 evaluation every run shares (the SFT policy, the same sampling seed) scores RM "
            f"{step0[1][0]:.4f}, gold {step0[1][1]:.5f} there against {step0[0][0]:.4f}, {step0[0][1]:.5f} in the "
            "exploration (with the same code; the SFT and reward-model weights trained there were bit-identical under "
            "transformers 5.19/numpy 2.3.5 and 5.23/2.4.6). So fresh and exploration seeds are never paired: the "
            "fresh seeds are compared among themselves.", "", *table, ""]


def machines_text(summaries: Sequence[dict], pair: Sequence[str], meta=None) -> str:
    """Which SFT + RM seeds of ``pair``'s comparison were made on which machine, and whether the machine kind is
    then confounded with the SFT + RM seed."""
    by_machine = model_seeds_by_machine(summaries, tuple(pair), meta)
    text = "; ".join(f"SFT + RM seed{'s' if len(tasks) > 1 else ''} "
                     f"{', '.join(str(TASKS[t].model_seed) for t in tasks)} on {machine}"
                     for machine, tasks in by_machine.items())
    if len(by_machine) > 1:
        text += (": the machine kind is confounded with the SFT + RM seed, so the spread across SFT + RM seeds "
                 "contains the difference between these machine kinds (\"The machine component\")")
    return text


def model_seed_lines(summaries: Sequence[dict], meta=None) -> List[str]:
    """The report's section on the SFT + RM seeds: per pair, per model seed and across them, both metrics."""
    found = model_seed_comparisons(summaries)
    if not found:
        return []
    tests = multiplicity(summaries)
    tasks = ", ".join(model_seed_tasks("long"))
    lines = ["#### Two pairs on several SFT + RM seeds", "",
             f"MA-PPO n = 5 − token PPO at the same λ (final score, paired by PPO seed), with the SFT and reward model trained "
             f"from each SFT + RM seed (`MODEL_SEED_TASKS`: {tasks} beside the long task's own 1234; the seed sets the base "
             f"model's initialisation, the SFT / RM / PPO partition of the training rows and their order): the confirmation's "
             f"planned pair at λ = 1 (exploratory by the check), and the paper's at λ = 0.95 (on seed 1234 its runs are the "
             f"exploration's; on the others, fresh seeds); the machines each pair's runs were made on: below the table. The "
             f"*across* row's interval is Student's t over the model seeds' means (degrees of freedom: model seeds − 1): it "
             f"covers the SFT + RM seed as well as the PPO seed; its equivalence test is TOST over the same means. RM "
             f"differences are each model seed's own reward model's scale.", "",
             "| pair | SFT + RM seed | PPO seeds | step-0 gold (SFT policy) | step-0 RM | gold difference [t CI] (ahead) "
             "| RM difference [t CI] (ahead) |",
             "|---|---|---|---|---|---|---|"]
    notes = []
    for (baseline, method), metrics in found.items():
        gold, rm = metrics["gold"], metrics["rm"]
        name = f"{method} − {baseline}"
        for i, model_seed in enumerate(gold.model_seeds):
            cells = [f"{m.per_model_seed[i].diff.text(d)} ({m.per_model_seed[i].ahead}/{m.per_model_seed[i].diff.n})"
                     for m, d in ((gold, 3), (rm, 2))]
            lines.append(f"| {name} | {model_seed} | {_seed_text(gold.seeds[i])[6:]} | {gold.step0[i]:.4f} | "
                         f"{rm.step0[i]:.3f} | {cells[0]} | {cells[1]} |")
        adjusted = {m.metric: tests["model seeds", (baseline, method), m.metric] for m in (gold, rm)}
        equivalences = {metric: test.equivalence for metric, test in adjusted.items()}
        cells = [f"{m.across.mean:.{d}f} [{m.across.low:.{d}f}, {m.across.high:.{d}f}]; "
                 f"{'equivalent' if equivalences[m.metric].equivalent else 'not shown equivalent'} within "
                 f"±{m.across.equivalence.margin:g} (90% CI [{m.across.equivalence.low:.{d}f}, "
                 f"{m.across.equivalence.high:.{d}f}]; Holm-adjusted TOST p {format_p(equivalences[m.metric].p)}); "
                 f"Holm p {format_p(adjusted[m.metric].p_holm)}: "
                 + reading(m.across.mean, adjusted[m.metric].p_holm, equivalences[m.metric], "MA-PPO", "token PPO")
                 for m, d in ((gold, 3), (rm, 2))]
        lines.append(f"| {name} | across {len(gold.model_seeds)} | {len(gold.seeds[0])} each | | | {cells[0]} | {cells[1]} |")
        failed = [f"SFT + RM seed {m} {run['arm']} seed {run['seed']} ({why})"
                  for m, run, why in model_seed_failures(summaries, gold)]
        notes.append(f"- {name}, failed runs ({len(failed)} of {2 * sum(map(len, gold.seeds))}; evaluated every 12 "
                     "iterations on the fresh seeds): " + ("; ".join(failed) or "none") + ". They stay in every "
                     "figure above (a failure is an outcome of the method).")
        notes.append(f"- {name}, made on: {machines_text(summaries, (baseline, method), meta)}.")
        for m in (gold, rm):
            spread, wild = within_spread(summaries, m)
            kept = [v for i, v in enumerate(model_seed_values(summaries, m)[name]) if i != wild]
            between = (f"; without SFT + RM seed {m.model_seeds[wild]}, whose wild within-seed spread inflates the "
                       f"within term, {across_model_seeds(kept, 1.0).between_sd:.4f}" if wild is not None else "")
            notes.append(f"- {name}, {m.metric}: the difference's standard deviation across PPO seeds (within a model "
                         f"seed, pooled) {m.across.within_sd:.4f}, across model seeds {m.across.between_sd:.4f} (method "
                         f"of moments, floored at 0{between}); that the model seeds' mean differences are equal: one-way ANOVA p "
                         f"{format_p(m.across.p_differ)}, Kruskal-Wallis rank test p {format_p(m.across.p_rank)}. "
                         f"Within-seed standard deviations: " + ", ".join(
                             f"{seed} {sd:.3f}" for seed, sd in zip(m.model_seeds, spread))
                         + (f" — SFT + RM seed {m.model_seeds[wild]}'s is over 3× their median, which inflates the "
                            "ANOVA's within-seed variance; the rank test is not moved by one wild run"
                            if wild is not None else "") + ".")
        if len(gold.model_seeds) - 1 < 5:
            notes.append(f"- {name}: the *across* interval{few_df(len(gold.model_seeds) - 1)}.")
    own = {pair: own_family(metrics) for pair, metrics in found.items()}
    notes.append("- The family: these rows are Holm-adjusted over the " + f"{2 * len(found)} tests of \"across SFT + "
                 "RM seeds\" (every pair, both metrics), a family set after the 3-seed data had been seen (\"Order of "
                 "decisions\"). In each pair's own family (its gold and RM tests only; no commit fixed that family "
                 "before the runs either, so it is as post hoc) the TOST p would be: "
                 + "; ".join(f"{p[1]} − {p[0]} gold {format_p(own[p]['gold'].equivalence.p)}, RM "
                             f"{format_p(own[p]['rm'].equivalence.p)}" for p in own)
                 + ": where one is below 0.05 the verdict depends on the family chosen.")
    notes.append("- RM differences: each SFT + RM seed's difference is on its own reward model's scale (step-0 RM "
                 "above), so their mean is a mean over as many scales, and the RM margin "
                 f"±{EQUIVALENCE_MARGINS['rm']:g} was set on seed {TASKS['long'].model_seed}'s.")
    return lines + [""] + notes + [""]


def new_seed_lines(summaries: Sequence[dict], meta=None) -> List[str]:
    """Prediction intervals for the pairs of :data:`evaluation.study.design.MODEL_SEED_PAIRS` (each arm's final gold and the
    pair's difference): a new PPO seed on SFT + RM seed 1234, and a new SFT + RM seed
    (:func:`evaluation.study.stats.new_model_seed_interval`)."""
    found = model_seed_comparisons(summaries)
    if not found:
        return []
    home = TASKS["long"].model_seed
    lines = ["#### Where a new seed would land", "",
             "95% prediction intervals of final gold, from the runs above (normal model: value = μ + SFT + RM seed + PPO "
             f"seed). *New PPO seed on {home}*: Student's t over that model seed's PPO seeds, s·√(1 + 1/n). *New SFT + RM "
             "seed, mean of n PPO seeds*: t over the model seeds' means (model seeds − 1 degrees of freedom), "
             "s_m·√(1 + 1/S). *One run on a new SFT + RM seed*: the same t with s_m²(1 + 1/S) + s_w²(1 − 1/n) (s_w² "
             "the pooled within-model-seed variance). Degrees of freedom and machines: "
             + "; ".join(f"{m} − {b}: {len(c['gold'].model_seeds) - 1}"
                         + ("" if len(c["gold"].model_seeds) > 5 else ", fewer than 5: wide and fragile")
                         + f" ({machines_text(summaries, (b, m), meta)})"
                         for (b, m), c in found.items())
             + ". A machine kind none of them ran on adds a component these intervals contain only as far as their "
             "machines differ (\"The machine component\").", "",
             f"| pair | value | SFT + RM seeds | new PPO seed on {home} | new SFT + RM seed, mean of n PPO seeds | "
             "one run on a new SFT + RM seed |", "|---|---|---|---|---|---|"]
    for (baseline, method), metrics in found.items():
        gold = metrics["gold"]
        for name, per_model_seed in model_seed_values(summaries, gold).items():
            at_home = t_interval(per_model_seed[gold.model_seeds.index(home)], new_seed=True)
            new = new_model_seed_interval(per_model_seed)
            lines.append(f"| {method} − {baseline} | {name} | {', '.join(map(str, gold.model_seeds))} "
                         f"(n = {len(gold.seeds[0])}) | [{at_home[0]:.3f}, {at_home[1]:.3f}] | {new.mean:.3f} "
                         f"[{new.mean_low:.3f}, {new.mean_high:.3f}] | [{new.run_low:.3f}, {new.run_high:.3f}] |")
    return lines + [""]


def _members(tests) -> str:
    """A family's tests, that a reader can recompute them: task: method − baseline (seeds) metrics, else by key."""
    found: Dict[str, List[str]] = {}
    for key in tests:
        name = (f"{key[0]}: {key[1]} − {key[2]} ({_seed_text(list(key[4]))})" if len(key) == 5 else
                f"{key[0]}: {' − '.join(reversed(key[1])) if isinstance(key[1], tuple) else key[1]}")
        found.setdefault(name, []).append(key[3] if len(key) == 5 else key[-1])
    return "; ".join(f"{name} {'/'.join(metrics)}" for name, metrics in found.items())


def family_lines(summaries: Sequence[dict]) -> List[str]:
    """The report's statement of the multiplicity rule and its families, each with its tests."""
    families = comparison_families(summaries)
    return ["#### Families of tests: one multiplicity rule", "",
            "The p of every test below (a difference's t test and its TOST) is Holm-adjusted within its family, and "
            "so is every equivalence claim (claimed when the adjusted TOST p < 0.05), so a difference and an "
            "equivalence are held to the same family-wise error rate; these are the p's printed as *Holm p* and as "
            "*TOST p* without another qualifier. Printed beside them and not Holm-adjusted: the verdict tables' raw "
            "*p* column; the one-way ANOVA and Kruskal-Wallis p's of \"Two pairs on several SFT + RM seeds\" (and "
            "the README's \"rank test p < 0.05\"), raw and in no family; each pair's TOST p \"in its own family\" "
            "(Holm over that pair's two tests, a family not below). A comparison printed in two tables is one test, "
            "in the first family below that holds it, and prints the same p everywhere. Every family was set after "
            "the data it holds had been seen (the plans' *family* in \"Pre-registration, checked\"): exploratory.", "",
            "| family | tests | what it holds | its tests (task: method − baseline (seeds) metrics) |",
            "|---|---|---|---|",
            *(f"| {name} | {len(tests)} | {what} | {_members(tests)} |" for name, (what, tests) in families.items()
              if tests), ""]


def failure_lines(summaries: Sequence[dict], task: str) -> List[str]:
    """Every failed run of the task (:data:`evaluation.study.stats.FAILED_RULE`), and every run whose length fell
    below half its step-0 length at some evaluation, even if it recovered."""
    groups = by_arm(summaries, task)
    failed = failures(groups)
    lines = ["#### Failed runs: collapsed or diverged", "",
             f"One definition throughout: {FAILED_RULE}. *Dipped*: the eval length fell below half its step-0 length "
             "at some evaluation (recovered or not; seed: start → lowest at step, final). Length is the collapse "
             "detector the committed summaries allow (the policy entropy is logged per training step, not kept in "
             "`runs.jsonl`).", "", "| arm | seeds | failed (seed: why) | dipped |", "|---|---|---|---|"]
    for arm in (a for a in ARMS if a in groups):
        dipped = {s: collapse(r["steps"], r["length"]) for s, r in sorted(groups[arm].items())}
        lines.append(f"| {arm} | {len(groups[arm])} | {len(failed.get(arm, {}))}"
                     + "".join(f"; {s}: {why}" for s, why in failed.get(arm, {}).items()) + " | "
                     + ("; ".join(f"{s}: {e.text()}" for s, e in dipped.items() if e) or "—") + " |")
    return lines + [""]


def convergence_lines(groups: Dict[str, Dict[int, dict]]) -> List[str]:
    """Whether each arm's final gold is a plateau: its last-quarter change, and what an end to the rise would cost."""
    arms = [a for a in ARMS if a in groups]
    rows = {arm: plateau(groups, arm) for arm in arms}
    still = [arm for arm, (late, _) in rows.items() if late.t_low > 0]
    lines = ["#### Plateau: is the final gold a plateau or a stopping point?", "",
             f"{len(still)} of {len(arms)} arms' gold still rises over the last quarter of training (t CI above 0): "
             f"{', '.join(still) or 'none'}. A plateau test needs longer runs: the cost of a run grows with its "
             "steps (\"What was not run\"), so doubling every arm's steps doubles the study's CPU time.", "",
             "| arm | seeds | gold change over the last quarter [t CI] | share of the whole rise |", "|---|---|---|---|"]
    for arm, (late, share) in rows.items():
        lines.append(f"| {arm} | {late.n} | {late.text(4)} | {share:.0%} |")
    return lines + [""]


def not_run_lines(summaries: Sequence[dict]) -> List[str]:
    """What the study did not run, with its cost in CPU seconds from the long task's runs (markers' CPU time)."""
    groups = by_arm(summaries, "long")
    cpus = [s["cpu_s"] for s in summaries if s["task"] == "long" and s.get("cpu_s")]
    if not cpus or "ppo" not in groups:
        return []
    cpu = statistics.fmean(cpus)
    exploration, confirmation = seed_split(groups)
    fresh = confirmation_seeds(len(exploration))
    missing = [(arm, seed) for tier in CONFIRMATION_TIERS["long"] for seed in fresh for arm in tier
               if seed not in groups.get(arm, {})]
    arms = sorted({arm for arm in groups if set(exploration) <= set(groups[arm])})
    hours = 3600 * 2
    lines = ["## What was not run, and what it would cost", "",
             f"Costs from this study's long-task runs: {cpu:.0f} CPU s per run on average (markers), so 2 free cores "
             f"train {hours / cpu:.0f} runs per hour; the machines it ran on were shared with other jobs.", ""]
    best, confirmed = confirmation_verdicts(groups)
    fresh_cpus = [run["cpu_s"] for runs in groups.values() for seed, run in runs.items()
                  if seed in confirmation and run.get("cpu_s")]
    if fresh_cpus:
        cpu = statistics.fmean(fresh_cpus)
        lines += [f"The confirmation's runs cost {cpu:.0f} CPU s each on its machine (evaluating every 12 "
                  "iterations; that machine's CPU seconds ran slower under the load it shared), used below.", ""]
    if confirmed and not multiplicity(summaries)["verdict", "confirmation", "gold"].equivalence.equivalent:
        gold = confirmed["gold"]
        diffs = [d for fold in gold.folds for d in fold.diffs]
        tests = multiplicity(summaries)
        family = sum(t.family == tests["verdict", "confirmation", "gold"].family for t in tests.values())
        need = seeds_for_equivalence(diffs, EQUIVALENCE_MARGINS["gold"], ALPHA / family)
        procedure_arms = 1 + len(mappo_family(groups, gold.seeds))  # the procedure chooses among every candidate on every seed
        more = procedure_arms * (need - gold.diff.n) if need else 0
        lines.append("- Seeds to decide the confirmation's gold comparison (best against best): " + (
            f"if further seeds kept the observed mean ({gold.diff.mean:+.4f}) and spread, equivalence within "
            f"±{EQUIVALENCE_MARGINS['gold']:g} would show, after Holm over its family of {family} tests (each TOST at "
            f"α/{family}, which is enough for Holm), at {need} seeds per arm; the procedure trains all {procedure_arms} "
            f"of its arms ({best} and MA-PPO's {procedure_arms - 1} candidates) on each seed, so {need - gold.diff.n} more seeds "
            f"are {more} more runs, {more * cpu / 3600:.1f} CPU hours" if need else
            "the observed mean lies outside the margin: more seeds would test a difference, not equivalence") + ".")
    if missing:
        lines.append(f"- The rest of the confirmation ({len(missing)} runs: "
                     + ", ".join(f"{arm} {_seed_text(sorted(s for a, s in missing if a == arm))}"
                                 for arm in dict.fromkeys(a for a, _ in missing))
                     + f"): {len(missing) * cpu / 3600:.1f} CPU hours (`bash scripts/reproduce/study.sh` trains them next).")
    further_cpus = [s["cpu_s"] for s in summaries if s["task"] in model_seed_tasks("long") and s.get("cpu_s")]
    comparisons = model_seed_comparisons(summaries)
    per_run = statistics.fmean(further_cpus) if further_cpus else cpu  # the further SFT + RM seeds' own runs
    for (baseline, method), metrics in comparisons.items():
        gold = metrics["gold"].across
        if multiplicity(summaries)["model seeds", (baseline, method), "gold"].equivalence.equivalent:
            continue
        tests = multiplicity(summaries)
        family = sum(t.family == tests["model seeds", (baseline, method), "gold"].family for t in tests.values())
        need = seeds_for_equivalence(gold.means, EQUIVALENCE_MARGINS["gold"], ALPHA / family)
        runs = 2 * len(metrics["gold"].seeds[0])
        lines.append(f"- SFT + RM seeds to decide {method} − {baseline} on gold: the interval across model seeds "
                     "narrows with model seeds, not PPO seeds; " + (
                         f"if further model seeds kept the observed mean ({gold.mean:+.4f}) and spread of the model "
                         f"seeds' means, equivalence within ±{EQUIVALENCE_MARGINS['gold']:g} would show, after Holm "
                         f"over its family of {family} tests (TOST at α/{family}), at {need} "
                         f"model seeds ({need - len(gold.means)} more, each an SFT and a reward model and {runs} runs: "
                         f"{(need - len(gold.means)) * runs * per_run / 3600:.1f} CPU hours plus the models)"
                         if need else "the observed mean lies outside the margin: more model seeds would test a "
                         "difference, not equivalence") + ".")
    further = [(task, arm, seed) for pair in MODEL_SEED_PAIRS["long"] for task in model_seed_tasks("long")
               for arm in pair for seed in fresh if seed not in by_arm(summaries, task).get(arm, {})]
    if further:
        lines.append(f"- The pairs of `MODEL_SEED_PAIRS` on the further SFT + RM seeds ({len(further)} runs: "
                     + ", ".join(f"{task}/{arm} {_seed_text(sorted(s for t, a, s in further if (t, a) == (task, arm)))}"
                                 for task, arm in sorted(dict.fromkeys((t, a) for t, a, _ in further),
                                                         key=lambda pair: pair[0]))
                     + f"): {len(further) * cpu / 3600:.1f} CPU hours plus {len({t for t, _, _ in further})} × "
                     "(SFT + RM: about 4 minutes of 2 cores) where they are missing (`bash scripts/reproduce/study.sh` "
                     "trains them after the confirmation).")
    plateau_hours = len(arms) * len(exploration) * cpu / 3600
    lines += [f"- A plateau: doubling the long task's {groups['ppo'][exploration[0]]['steps'][-1]} iterations for the "
              f"{len(arms)} arms × {len(exploration)} exploration seeds costs another {plateau_hours:.1f} CPU hours, "
              "and whether 96 iterations reach a plateau is itself unknown.",
              "- Several evaluation sampling seeds for every run: a run's evaluations are seeded (`--eval_seed`); drawing its "
              "final actor again under other seeds is `python -m evaluation.study_positions --sample_seeds ...` (report, \"The "
              "evaluation's own sampling noise\", for the actors kept on the machine that ran them).", ""]
    return lines


def readme_table(summaries: Sequence[dict]) -> List[str]:
    """The README's summary table, rendered from the same summaries as the report (a test keeps them equal)."""
    lines = ["| task | arm | seeds | final gold [t CI] | gold − PPO [t CI] (ahead) | new seed's gold − PPO | "
             "final RM [t CI] | RM − PPO [t CI] (ahead) | Holm p (gold; RM) | final length | failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    tests = multiplicity(summaries)
    for task, arms in README_ARMS.items():
        groups = by_arm(summaries, task)
        for arm in (a for a in arms if a in groups and "ppo" in groups):
            seeds = common_seeds(groups["ppo"], groups[arm])
            if len(seeds) < 2:
                continue  # a confirmation arm: its own table
            cells = []
            for metric in ("gold", "rm"):
                finals = [groups[arm][s][metric][-1] for s in seeds]
                cells.append(mean_estimate(finals).text(3 if metric == "gold" else 2))
                if arm == "ppo":
                    cells += ["—"] if metric == "rm" else ["—", "—"]
                    continue
                d = paired_difference([groups["ppo"][s][metric][-1] for s in seeds], finals)
                cells.append(f"{d.diff.text(3 if metric == 'gold' else 2)} ({d.ahead}/{d.diff.n})")
                if metric == "gold":
                    cells.append(f"[{d.diff.new_low:.3f}, {d.diff.new_high:.3f}]")
            holm_p = ("—" if arm == "ppo" else "; ".join(
                format_p(adjusted_test(tests, task, arm, "ppo", m, seeds).p_holm) for m in ("gold", "rm")))
            length = mean_estimate([groups[arm][s]["length"][-1] for s in seeds]).text(1)
            lines.append(f"| {task} | {arm} | {len(seeds)} | " + " | ".join(cells)
                         + f" | {holm_p} | {length} | {failed_cell(groups, arm, seeds)} |")
    return lines


def confirmation_table(summaries: Sequence[dict]) -> List[str]:
    """The README's confirmation table: every arm run on the fresh seeds, against token PPO at its exploration-best
    λ on the fresh seeds both ran (paired; an arm of a later tier may have fewer, its ``seeds`` cell says how
    many), with equivalence tested against the margins and Holm's correction over the table's comparisons (both
    metrics)."""
    groups = by_arm(summaries, "long")
    best, paired = confirmation_pairs(groups)
    if not paired:
        return []
    arms = list(paired)
    tests = multiplicity(summaries)
    lines = [f"| arm | seeds | final gold [t CI] | gold − {best} [t CI] (ahead) | final RM [t CI] | RM − {best} [t CI] "
             "(ahead) | Holm p (gold; RM) | equivalent within ±Δ (gold; RM) | final length | failed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        seeds = paired[arm]
        cells = []
        for metric, digits in (("gold", 3), ("rm", 2)):
            cells.append(mean_estimate([groups[arm][s][metric][-1] for s in seeds]).text(digits))
            if arm == best:
                cells.append("—")
            else:
                diffs = [groups[arm][s][metric][-1] - groups[best][s][metric][-1] for s in seeds]
                cells.append(f"{mean_estimate(diffs).text(digits)} ({sum(d > 0 for d in diffs)}/{len(diffs)})")
        if arm == best:
            holm_p = equivalent = "—"
        else:
            found = {m: adjusted_test(tests, "long", arm, best, m, seeds) for m in ("gold", "rm")}
            holm_p = "; ".join(format_p(found[m].p_holm) for m in ("gold", "rm"))
            equivalent = "; ".join("yes" if found[m].equivalence.equivalent else "no" for m in ("gold", "rm"))
        length = mean_estimate([groups[arm][s]["length"][-1] for s in seeds]).text(1)
        lines.append(f"| {arm} | {len(seeds)} | " + " | ".join(cells) + f" | {holm_p} | {equivalent} | {length} | "
                     f"{failed_cell(groups, arm, seeds)} |")
    return lines


def _interval(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def commits_text(rows) -> str:
    """The commits ``rows`` were trained at."""
    return ", ".join(f"`{c[:7]}`" for c in sorted({r.get("commit") or "unrecorded" for r in rows}))


def _inside(values: Sequence[float], low: float, high: float) -> int:
    return sum(low <= v <= high for v in values)


def machine_component_lines(summaries: Sequence[dict], reruns: Sequence[dict], meta=None,
                            async_runs: Sequence[dict] = ()) -> List[str]:
    """The λ = 1 pair's committed runs trained again (same task, arm and seed) on another machine kind
    (``machine_reruns.jsonl``): what they measured and what they cannot show, per seed and per arm, against the
    published new-seed interval; then the SFT + RM seeds made on that machine kind."""
    pair = MODEL_SEED_PAIRS["long"][0]
    pairs = rerun_pairs(summaries, reruns, pair)
    if not pairs and len(model_seeds_by_machine(summaries, tuple(pair), meta)) < 2:
        return []
    lines = ["#### The machine component", ""]
    if pairs:
        step0 = sorted({(c["rm"][0], r["rm"][0]) for c, r in pairs})
        same = [r for r in reruns if any(bits_equal(r, a) and (a["arm"], a["seed"]) == (r["arm"], r["seed"])
                                         for a in async_runs if not a.get("async_rollout"))]
        lines += [f"**What was measured.** The pair's {len(pairs)} committed long-task runs (seeds "
                  f"{_seed_text(sorted({c['seed'] for c, _ in pairs}))[6:]}) trained again, same task, arm and seed, "
                  f"on {'; '.join(sorted({machine_name(r, meta) for _, r in pairs}))} (`machine_reruns.jsonl`, never "
                  f"in `runs.jsonl`). The runner trains each task's SFT and reward model under OUT, so those were "
                  f"trained again there too: step-0 RM (the SFT policy, the same sampling seed) "
                  + "; ".join(f"{c:.3f} committed, {r:.3f} rerun" for c, r in step0)
                  + f". A rerun therefore differs from its committed run in the machine, the code (reruns at "
                  f"{commits_text(r for _, r in pairs)}, committed runs at {commits_text(c for c, _ in pairs)}), the "
                  f"SFT and reward model's bits and the PPO seed's noise on those bits at once. **What it cannot "
                  f"show**: which of these moved a run (they are confounded), nor, with these seeds, a machine effect "
                  f"smaller than the spread across seeds. Failed runs: {sum(bool(failure(c)) for c, _ in pairs)} of "
                  f"{len(pairs)} committed, {sum(bool(failure(r)) for _, r in pairs)} of {len(pairs)} reruns."
                  + (f" {len(same)} of the {len(reruns)} reruns equal, bit for bit at every evaluation, the K = 0 runs "
                     f"of the asynchronous-rollout check (`docs/async/runs.jsonl`, trained at "
                     f"{commits_text(a for a in async_runs if not a.get('async_rollout'))} and another thread count, filed "
                     "before the reruns: \"Order of decisions\"), so they are not a further draw beside those; that "
                     "equality shows that the code between those two commits left these bits alone, not the code "
                     "between the committed runs' commits and them." if same else ""), "",
                  "| task | arm | seed | committed | rerun | rerun − committed | bits equal (step 0; every evaluation) "
                  "| failed (committed; rerun) |", "|---|---|---|---|---|---|---|---|"]
        for c, r in pairs:
            lines.append(f"| {c['task']} | {c['arm']} | {c['seed']} | {c['gold'][-1]:.4f} | {r['gold'][-1]:.4f} | "
                         f"{r['gold'][-1] - c['gold'][-1]:+.4f} | {'yes' if bits_equal(c, r, upto=0) else 'no'}; "
                         f"{'yes' if bits_equal(c, r) else 'no'} | {failure(c) or 'no'}; {failure(r) or 'no'} |")
        lines += ["", f"Final gold. *Published*: the new-PPO-seed interval of \"Where a new seed would land\" (SFT + RM seed "
                  f"{TASKS['long'].model_seed}), estimated from the committed runs of the same seeds; a failed rerun inside it "
                  f"counts as inside, and the difference's reruns are derived from the two arms' (not further evidence).", "",
                  "| value | seeds | rerun − committed, mean [t CI] | its SD | SD across committed seeds | published "
                  "(seeds) | reruns inside |", "|---|---|---|---|---|---|---|"]
        by_arm_seed = {(c["arm"], c["seed"]): (c["gold"][-1], r["gold"][-1]) for c, r in pairs}
        seeds = sorted({seed for _, seed in by_arm_seed if all((a, seed) in by_arm_seed for a in pair)})
        values = {arm: [by_arm_seed[arm, s] for s in sorted(s for a, s in by_arm_seed if a == arm)] for arm in pair}
        values[f"{pair[1]} − {pair[0]}"] = [tuple(m - b for b, m in zip(by_arm_seed[pair[0], s], by_arm_seed[pair[1], s]))
                                            for s in seeds]
        for name, found in values.items():
            before, after = [c for c, _ in found], [r for _, r in found]
            diffs = [n - c for c, n in zip(before, after)]
            published = published_new_seed(summaries, "long", name)
            cell = (f"{_interval(*published[:2])} ({_seed_text(list(published[2]))[6:]}) | "
                    f"{_inside(after, *published[:2])} of {len(after)}" if published else "— | —")
            spread = (f"{mean_estimate(diffs).text(4)} | {statistics.stdev(diffs):.4f} | {statistics.stdev(before):.4f}"
                      if len(diffs) > 1 else f"{diffs[0]:+.4f} | — | —")
            lines.append(f"| {name} | {len(found)} | {spread} | {cell} |")
        lines.append("")
    return lines + new_machine_model_seed_lines(summaries, meta)


def new_machine_model_seed_lines(summaries: Sequence[dict], meta=None) -> List[str]:
    """The pair's runs on the SFT + RM seeds made on another machine kind than the long task's, against the intervals
    of a new SFT + RM seed estimated from the model seeds made on the long task's machine only
    (:func:`evaluation.study.decisions.new_machine_checks`)."""
    lines = []
    for check in new_machine_checks(summaries, meta):
        df = len(check.estimated) - 1
        lines += [f"**SFT + RM seeds {', '.join(map(str, check.checked))}, made on {check.machine}.** Against the "
                  "intervals of a new SFT + RM seed (\"Where a new seed would land\") estimated from SFT + RM seeds "
                  f"{', '.join(map(str, check.estimated))} alone (made on {check.home}; their first {check.n} PPO seeds "
                  f"each){few_df(df)}. What it measured: whether runs on new SFT + RM seeds, a new machine kind and new "
                  "PPO seeds land inside those intervals. What it cannot show: intervals this wide hold runs that "
                  "failed (the table counts them), so landing inside says little; and runs of one SFT + RM seed share "
                  "its model, so only the seeds' means are independent checks (as many as there are SFT + RM seeds).",
                  "", "| value | one run: interval | runs inside (failed runs among them) | mean of n PPO seeds: "
                  "interval | means inside (each SFT + RM seed's mean) |", "|---|---|---|---|---|"]
        for name, (fitted, values, means, failed) in check.values.items():
            inside = [fitted.run_low <= v <= fitted.run_high for v in values]
            lines.append(f"| {name} | {_interval(fitted.run_low, fitted.run_high)} | {sum(inside)} of {len(values)} "
                         f"({sum(i and f for i, f in zip(inside, failed))} of the {sum(failed)} failed) | "
                         f"{_interval(fitted.mean_low, fitted.mean_high)} | "
                         + (f"{_inside(means.values(), fitted.mean_low, fitted.mean_high)} of {len(means)} ("
                            + ", ".join(f"{m}: {v:.3f}" for m, v in means.items()) + ")" if means else
                            f"— (none has {check.n} PPO seeds yet)") + " |")
        lines.append("")
    return lines


def unseen_seed_lines(summaries: Sequence[dict], unseen: Sequence[dict], meta=None) -> List[str]:
    """Each unseen seed (``unseen_seeds.jsonl``) against its arm's published 95% interval of a new PPO seed
    (:func:`evaluation.study.decisions.unseen_seeds`): inside or not, failed or not, and its standardised residual
    (final − the interval's centre, over s·√(1 + 1/n))."""
    found = unseen_seeds(summaries, unseen, meta)
    if not found:
        return []
    machines = sorted({u.machine for u in found})
    estimated = sorted({m for u in found for m in u.estimated_on.split("; ")})
    rows = {(r["task"], r["arm"], r["seed"]): r for r in unseen}
    failed = {u: failure(rows[u.task, u.arm, u.seed]) for u in found}
    residual = {u: (u.gold - (u.low + u.high) / 2) / ((u.high - u.low) / 2 / scipy_stats.t.ppf(0.975, len(u.seeds) - 1))
                for u in found}
    below = sum(r < 0 for r in residual.values())
    base = [r for r in summaries for u in found if (r["task"], r["arm"]) == (u.task, u.arm) and r["seed"] in u.seeds]
    lines = ["#### Unseen seeds of every published arm", "",
             f"**What was measured.** One PPO seed (17) no committed row of the arm has, for every published arm of both "
             f"tasks: `unseen_seeds.jsonl` (filed by `python -m evaluation.study unseen`, never in `runs.jsonl`, so every "
             f"interval below is estimated without it), made on {'; '.join(machines)}, whose final gold is set against the "
             f"arm's published new-seed interval, estimated on the committed runs made on {'; '.join(estimated)}. The runner "
             f"trained each task's SFT and reward model again on that machine (same SFT + RM seed): their step-0 evaluation "
             f"equals the committed runs' bit for bit on {sum(u.step0_equal for u in found)} of {len(found)} rows, so an "
             f"unseen seed changes the PPO seed, the machine, the code (unseen seeds at {commits_text(unseen)}, the committed "
             f"runs at {commits_text(base)}) and the SFT and reward model's bits at once. Each interval: "
             + "; ".join(dict.fromkeys(u.where for u in found)) + " (Student's t over the seeds named, s·√(1 + 1/n)).",
             "", f"**{sum(u.inside for u in found)} of {len(found)} land inside** ({sum(bool(f) for f in failed.values())} "
             "failed: " + ("; ".join(f"{u.task}/{u.arm} ({why}, " + ("inside" if u.inside else "outside") + ")"
                                    for u, why in failed.items() if why) or "none") + "). "
             f"{below} of {len(found)} fall below their interval's centre (mean standardised residual "
             f"{statistics.fmean(residual.values()):+.2f}). **What it cannot show**: the rows are not independent draws "
             "around their intervals' centres — they share the machine and the retrained models, and most fall on one "
             "side — so a count of landings cannot be read against the 95% each interval would give alone; and a "
             "failed run inside its interval counts as inside. Intervals and counts only: no test, no family.", "",
             "| task | arm | seed | published interval (where; seeds; made on) | unseen seed's final gold | inside | "
             "standardised residual | failed | step-0 gold (unseen; committed) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for u in found:
        lines.append(f"| {u.task} | {u.arm} | {u.seed} | {_interval(u.low, u.high)} ({u.where}; {_seed_text(list(u.seeds))}; "
                     f"{u.estimated_on}) | {u.gold:.4f} | {'yes' if u.inside else 'no'} | {residual[u]:+.2f} | "
                     f"{failed[u] or 'no'} | {u.step0:.5f}; {', '.join(f'{v:.5f}' for v in u.committed_step0)} |")
    return lines + [""]
