"""What the study decides from the summaries (:mod:`evaluation.study.summaries`): the best-against-best verdict
of token PPO against MA-PPO (exploration seeds chosen on held-out halves, the confirmation on fresh seeds), its
collapse sensitivity, the families of comparisons and their Holm adjustment (one adjusted test per comparison,
printed everywhere), the comparisons across SFT + RM seeds, and the plateau / parity / ordering checks. Numbers
only: :mod:`evaluation.study.tables` and :mod:`evaluation.study.findings` turn them into text."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from scipy import stats as scipy_stats

from evaluation.study.design import (ARMS, CONFIRMATION_TIERS, EQUIVALENCE_MARGINS, LAMBDA_SWEEP, MAPPO_LAMBDAS,
                                     MODEL_SEED_PAIRS, README_ARMS, TASKS, model_seed_tasks)
from evaluation.study.stats import (ALPHA, AcrossModelSeeds, AdjustedTest, Equivalence, Estimate, NewModelSeed, Paired,
                                    ParityResult, across_model_seeds, adjust_families, area_under_curve, best_arm,
                                    failure, held_out_best_vs_best, last_quarter_change, mean_estimate,
                                    new_model_seed_interval, paired_difference, paired_t_p, parity, t_interval, tost)
from evaluation.study.summaries import (arm_lambda, by_arm, common_seeds, floored_groups, machine_name, mappo_family,
                                        run_key, seed_split, sweep_arms, token_ppo_family)


@dataclass(frozen=True)
class Verdict:
    """MA-PPO's best arm − token PPO's best arm on ``metric``, the bests chosen by final gold on other seeds than
    the compared ones (:func:`evaluation.study.stats.held_out_best_vs_best`), pooled over both halves."""

    metric: str
    seeds: Tuple[int, ...]
    folds: tuple
    diff: Estimate
    p: float
    equivalence: Equivalence

    @property
    def ahead(self) -> int:
        return sum(d > 0 for fold in self.folds for d in fold.diffs)


def verdicts(groups: Dict[str, Dict[int, dict]], ppo: Sequence[str], mappo: Sequence[str],
             seeds: Sequence[int]) -> Dict[str, Verdict]:
    """Per metric, the held-out best-against-best difference over ``seeds`` (bests chosen by gold on the other
    half); a family of one arm was chosen beforehand."""
    if not ppo or not mappo or len(seeds) < 4:
        return {}

    def finals(metric):
        return {a: {s: groups[a][s][metric][-1] for s in seeds} for a in (*ppo, *mappo)}

    result = {}
    for metric in ("gold", "rm"):
        folds = held_out_best_vs_best(finals("gold"), ppo, mappo, seeds, finals(metric))
        diffs = [d for fold in folds for d in fold.diffs]
        result[metric] = Verdict(metric, tuple(seeds), tuple(folds), mean_estimate(diffs), paired_t_p(diffs),
                                 tost(diffs, EQUIVALENCE_MARGINS[metric]))
    return result


def confirmation_verdicts(groups: Dict[str, Dict[int, dict]]) -> Tuple[Optional[str], Dict[str, Verdict]]:
    """On the confirmation's fresh seeds (those every candidate ran): token PPO at the λ that was best on the
    exploration seeds against MA-PPO's confirmation arms (its best chosen on the other half); (token PPO's arm,
    verdicts)."""
    exploration, confirmation = seed_split(groups)
    candidates = token_ppo_family(groups, exploration)
    if not candidates or not confirmation:
        return None, {}
    finals = {a: {s: groups[a][s]["gold"][-1] for s in exploration} for a in candidates}
    best = best_arm(finals, candidates, exploration)
    first_tier = [a for a in CONFIRMATION_TIERS["long"][0] if a in groups and a not in LAMBDA_SWEEP]
    if best not in groups or not first_tier:
        return best, {}
    seeds = [s for s in common_seeds(*(groups[a] for a in (best, *first_tier))) if s in confirmation]
    return best, verdicts(groups, [best], mappo_family(groups, seeds), seeds)


def reading(mean: float, p_holm: float, equivalence: Equivalence, better: str, worse: str) -> str:
    """The verdict in words: a difference (Holm-adjusted p < α), equivalence within the margin (TOST), both, or
    neither."""
    if p_holm < ALPHA:
        winner = better if mean > 0 else worse
        return f"{winner} ahead" + (f", by less than the margin ±{equivalence.margin:g}"
                                    if equivalence.equivalent else "")
    if equivalence.equivalent:
        return f"equivalent within ±{equivalence.margin:g}"
    return f"undecided: no difference shown, and equivalence within ±{equivalence.margin:g} not shown either"


SENSITIVITY = ("collapse-floored gold", "seeds without a failed run")


def collapse_sensitivity(groups: Dict[str, Dict[int, dict]]) -> Dict[str, Verdict]:
    """The headline verdict on gold, done again two ways that a collapsed run cannot win: every run's final
    gold floored for collapse (the whole procedure, token PPO's λ choice included), and the fresh seeds on which no
    run of the verdict's arms failed (:func:`evaluation.study.stats.failure`; the same choice of arms, halves of the
    seeds left)."""
    best, primary = confirmation_verdicts(groups)
    if not primary:
        return {}
    seeds, family = primary["gold"].seeds, mappo_family(groups, primary["gold"].seeds)
    kept = [s for s in seeds if not any(failure(groups[a][s]) for a in (best, *family))]
    found = {SENSITIVITY[0]: confirmation_verdicts(floored_groups(groups))[1].get("gold"),
             SENSITIVITY[1]: verdicts(groups, [best], family, kept).get("gold")}
    return {name: v for name, v in found.items() if v}


@dataclass(frozen=True)
class ModelSeedComparison:
    """A (token PPO, MA-PPO) pair of :data:`evaluation.study.design.MODEL_SEED_PAIRS` (``method`` − ``baseline``, final
    score) on each SFT + RM seed of the long task: per model seed the paired difference over the first ``n`` PPO
    seeds both arms share there (``n``: the fewest any model seed has), and across them
    :func:`evaluation.study.stats.across_model_seeds`."""

    baseline: str
    method: str
    metric: str
    model_seeds: Tuple[int, ...]
    seeds: Tuple[Tuple[int, ...], ...]
    """Per model seed, its PPO seeds."""
    per_model_seed: Tuple[Paired, ...]
    step0: Tuple[float, ...]
    """The SFT policy's score at step 0 on each model seed."""
    across: AcrossModelSeeds


def model_seed_comparison(summaries: Sequence[dict], pair: Sequence[str],
                          metric: str = "gold") -> Optional[ModelSeedComparison]:
    """None until at least two SFT + RM seeds hold both arms of ``pair`` on two common PPO seeds."""
    tasks = {task: TASKS[task].model_seed for task in ("long", *model_seed_tasks("long"))}
    baseline, method = pair
    groups = {task: by_arm(summaries, task) for task in tasks}
    shared = {task: seeds for task, seeds in pair_seeds(summaries, pair).items() if len(seeds) >= 2}
    if len(shared) < 2:
        return None
    n = min(len(seeds) for seeds in shared.values())
    seeds = {task: found[:n] for task, found in shared.items()}
    finals = {t: {arm: [groups[t][arm][s][metric][-1] for s in seeds[t]] for arm in pair} for t in shared}
    diffs = [[m - b for b, m in zip(finals[t][baseline], finals[t][method])] for t in shared]
    return ModelSeedComparison(baseline, method, metric, tuple(tasks[t] for t in shared),
                               tuple(tuple(seeds[t]) for t in shared),
                               tuple(paired_difference(finals[t][baseline], finals[t][method]) for t in shared),
                               tuple(groups[t][baseline][seeds[t][0]][metric][0] for t in shared),
                               across_model_seeds(diffs, EQUIVALENCE_MARGINS[metric]))


def model_seed_failures(summaries: Sequence[dict], comparison: ModelSeedComparison) -> List[Tuple[int, dict, str]]:
    """(SFT + RM seed, run, why) of every failed run behind ``comparison`` (both arms, its PPO seeds)."""
    tasks = {TASKS[t].model_seed: t for t in ("long", *model_seed_tasks("long"))}
    runs = [(m, by_arm(summaries, tasks[m])[arm][seed]) for m, seeds in zip(comparison.model_seeds, comparison.seeds)
            for arm in (comparison.baseline, comparison.method) for seed in seeds]
    return [(m, run, failure(run)) for m, run in runs if failure(run)]


def within_spread(summaries: Sequence[dict], comparison: ModelSeedComparison) -> Tuple[List[float], Optional[int]]:
    """Each SFT + RM seed's standard deviation of the difference over its PPO seeds, and the index of one more than
    3× their median (a wild seed, which inflates the ANOVA's pooled within-seed variance), None when none is."""
    spread = [statistics.stdev(d) for d in
              model_seed_values(summaries, comparison)[f"{comparison.method} − {comparison.baseline}"]]
    wild = max(range(len(spread)), key=spread.__getitem__)
    return spread, wild if 0 < 3 * statistics.median(spread) < spread[wild] else None


def own_family(metrics: Dict[str, ModelSeedComparison]) -> Dict[str, AdjustedTest]:
    """A pair's tests across SFT + RM seeds (gold, RM) Holm-adjusted as a family of their own."""
    return adjust_families({"own": {m: (list(c.across.means), EQUIVALENCE_MARGINS[m]) for m, c in metrics.items()}})


def pair_seeds(summaries: Sequence[dict], pair: Sequence[str]) -> Dict[str, List[int]]:
    """Per task of the long task's SFT + RM seeds on which both arms of ``pair`` ran, the PPO seeds they share."""
    groups = {task: by_arm(summaries, task) for task in ("long", *model_seed_tasks("long"))}
    return {task: common_seeds(*(g[arm] for arm in pair)) for task, g in groups.items() if all(arm in g for arm in pair)}


def model_seed_comparisons(summaries: Sequence[dict]) -> Dict[Tuple[str, str], Dict[str, ModelSeedComparison]]:
    """Every pair of :data:`evaluation.study.design.MODEL_SEED_PAIRS` measured on two or more SFT + RM seeds, both metrics."""
    found = {pair: {metric: model_seed_comparison(summaries, pair, metric) for metric in ("gold", "rm")}
             for pair in MODEL_SEED_PAIRS["long"]}
    return {pair: metrics for pair, metrics in found.items() if metrics["gold"]}


def same_lambda_comparisons(groups: Dict[str, Dict[int, dict]]) -> Dict[Tuple[str, str, str], dict]:
    """MA-PPO (n = 5 and the entropy rule) − token PPO at the same λ, per metric, paired by seed: the difference;
    keyed by (MA-PPO arm, token PPO arm, metric) (their tests: :func:`multiplicity`)."""
    ppo_at = {arm_lambda(a): a for a in LAMBDA_SWEEP if a in groups}
    found = {}
    for rule in MAPPO_LAMBDAS.values():
        for arm in (a for a in rule if a in groups and arm_lambda(a) in ppo_at):
            base = ppo_at[arm_lambda(arm)]
            seeds = common_seeds(groups[arm], groups[base])
            if len(seeds) < 2:
                continue
            for metric in ("gold", "rm"):
                diffs = [groups[arm][s][metric][-1] - groups[base][s][metric][-1] for s in seeds]
                found[arm, base, metric] = {"diff": paired_difference([0.0] * len(diffs), diffs)}
    return found


TestKey = Tuple
"""``(task, method, baseline, metric, seeds)`` of a paired comparison of final scores, or ``("verdict", procedure,
metric)``, or ``("model seeds", (baseline, method), metric)``."""


def _paired(groups: Dict[str, Dict[int, dict]], task: str, method: str, base: str, seeds: Sequence[int]
            ) -> Dict[TestKey, Tuple[List[float], float]]:
    return {(task, method, base, metric, tuple(seeds)): ([groups[method][s][metric][-1] - groups[base][s][metric][-1]
                                                          for s in seeds], EQUIVALENCE_MARGINS[metric])
            for metric in ("gold", "rm")}


def confirmation_pairs(groups: Dict[str, Dict[int, dict]]) -> Tuple[Optional[str], Dict[str, List[int]]]:
    """(token PPO's exploration-best arm, every arm run on the fresh seeds → the fresh seeds it shares with that
    arm, two or more); (None, {}) before the confirmation."""
    best, found = confirmation_verdicts(groups)
    if not found:
        return None, {}
    fresh = seed_split(groups)[1]
    paired = {a: [s for s in fresh if s in groups[a] and s in groups[best]]
              for a in (*LAMBDA_SWEEP, *mappo_family(groups, ())) if a in groups}
    return best, {a: seeds for a, seeds in paired.items() if len(seeds) >= 2}


def comparison_families(summaries: Sequence[dict]) -> Dict[str, Tuple[str, Dict[TestKey, Tuple[List[float], float]]]]:
    """Every test the report and the README print, in families, in this order (a comparison printed in two tables
    belongs to the first family that holds it): name → (what it holds, {key: (paired differences, margin)})."""
    groups = {task: by_arm(summaries, task) for task in TASKS}
    long = groups["long"]
    families: Dict[str, Tuple[str, Dict]] = {}
    seen = set()

    def add(name, what, tests):
        kept = {key: value for key, value in tests.items() if _canonical(key) not in seen}
        seen.update(_canonical(key) for key in kept)
        families[name] = (what, kept)

    best, confirmed = confirmation_verdicts(long)
    add("headline verdict", "the confirmation's MA-PPO best − token PPO best, gold and RM (the headline)",
        {("verdict", "confirmation", m): ([d for f in v.folds for d in f.diffs], EQUIVALENCE_MARGINS[m])
         for m, v in confirmed.items()})
    tests = {}
    best, paired = confirmation_pairs(long)
    for arm, seeds in paired.items():
        if arm != best:
            tests.update(_paired(long, "long", arm, best, seeds))
    add("confirmation", "every other arm on the fresh seeds − token PPO's exploration-best λ, both metrics", tests)
    tests = {}
    for task, arms in README_ARMS.items():
        for arm in (a for a in arms if a in groups[task] and a != "ppo" and "ppo" in groups[task]):
            seeds = common_seeds(groups[task]["ppo"], groups[task][arm])
            if len(seeds) >= 2:
                tests.update(_paired(groups[task], task, arm, "ppo", seeds))
    add("exploration against PPO", "every arm − PPO at λ = 0.95 on seeds 1-8, both tasks and metrics (the README's "
        "first table)", tests)
    tests = {}
    for arm, base, _ in same_lambda_comparisons(long):
        tests.update(_paired(long, "long", arm, base, common_seeds(long[arm], long[base])))
    add("same λ", "MA-PPO − token PPO at the same λ not already above, both metrics", tests)
    tests = {}
    for task in TASKS:
        for arm in (a for a in sweep_arms(groups[task], task) if a != "mappo"):
            seeds = common_seeds(groups[task][arm], groups[task]["mappo"])
            if len(seeds) >= 2:
                tests.update(_paired(groups[task], task, arm, "mappo", seeds))
    add("against MA-PPO n = 5", "every other arm of token PPO's λ and MA-PPO's n sweeps − MA-PPO n = 5 not "
        "already above, both tasks and metrics (the study page's n-sweep point)", tests)
    add("collapse sensitivity", "the headline verdict's gold with collapsed runs floored, and without the seeds "
        "of failed runs", {("verdict", name, "gold"): ([d for f in v.folds for d in f.diffs],
                                                         EQUIVALENCE_MARGINS["gold"])
                              for name, v in collapse_sensitivity(long).items()})
    add("across SFT + RM seeds", "each pair of `MODEL_SEED_PAIRS` over the SFT + RM seeds' means, both metrics",
        {("model seeds", pair, m): (list(c.across.means), EQUIVALENCE_MARGINS[m])
         for pair, metrics in model_seed_comparisons(summaries).items() for m, c in metrics.items()})
    return families


def _canonical(key: TestKey) -> TestKey:
    """A paired comparison and its reverse are one test."""
    if len(key) == 5:
        task, method, base, metric, seeds = key
        return (task, *sorted((method, base)), metric, seeds)
    return key


def multiplicity(summaries: Sequence[dict]) -> Dict[TestKey, AdjustedTest]:
    """Every test of :func:`comparison_families`, Holm-adjusted within its family, differences and equivalences alike
    (:func:`evaluation.study.stats.adjust_families`)."""
    return adjust_families({name: tests for name, (_, tests) in comparison_families(summaries).items()})


def adjusted_test(tests: Dict[TestKey, AdjustedTest], task: str, method: str, base: str, metric: str,
                  seeds: Sequence[int]) -> AdjustedTest:
    """The test of ``method − base`` on ``seeds`` (its equivalence interval in that direction)."""
    key = (task, method, base, metric, tuple(seeds))
    if key in tests:
        return tests[key]
    found = tests[(task, base, method, metric, tuple(seeds))]
    return AdjustedTest(found.family, found.p, found.p_holm, found.equivalence.flipped())


def plateau(groups: Dict[str, Dict[int, dict]], arm: str, metric: str = "gold") -> Tuple[Estimate, float]:
    """The arm's last-quarter change (seed mean, t CI) and that change as a share of its whole rise (step 0 to
    final, seed means)."""
    runs = groups[arm]
    seeds = common_seeds(runs)
    late = mean_estimate([last_quarter_change(runs[s]["steps"], runs[s][metric]) for s in seeds])
    rise = statistics.fmean(runs[s][metric][-1] - runs[s][metric][0] for s in seeds)
    return late, late.mean / rise if rise else math.nan


def ordering_agreement(groups: Dict[str, Dict[int, dict]], metric: str = "gold") -> Tuple[float, int]:
    """Kendall's τ between the arms' order by mean final ``metric`` and by mean AUC, and the number of arms."""
    arms = [a for a in ARMS if a in groups]
    finals = [statistics.fmean(r[metric][-1] for r in groups[a].values()) for a in arms]
    aucs = [statistics.fmean(area_under_curve(r["steps"], r[metric]) for r in groups[a].values()) for a in arms]
    return float(scipy_stats.kendalltau(finals, aucs).statistic), len(arms)


def parity_by_stop(groups: Dict[str, Dict[int, dict]], baseline: str, arm: str, stops: Sequence[int],
                   metric: str = "gold") -> Dict[int, ParityResult]:
    """Parity of ``arm`` against ``baseline`` on the curves cut at each step of ``stops``: how much the speed-up
    depends on where training stopped."""
    seeds = common_seeds(groups[baseline], groups[arm])
    steps = groups[arm][seeds[0]]["steps"]
    result = {}
    for stop in stops:
        keep = [i for i, step in enumerate(steps) if step <= stop]
        cut = [steps[i] for i in keep]
        result[stop] = parity(cut, [[groups[baseline][s][metric][i] for i in keep] for s in seeds],
                              [[groups[arm][s][metric][i] for i in keep] for s in seeds])
    return result


def bits_equal(a: dict, b: dict, upto: Optional[int] = None) -> bool:
    """Two runs' evaluations (RM, gold, length) are identical at every step both have (up to step ``upto``)."""
    steps = [s for s in a["steps"] if s in b["steps"] and (upto is None or s <= upto)]
    return bool(steps) and all(a[m][a["steps"].index(s)] == b[m][b["steps"].index(s)]
                               for s in steps for m in ("rm", "gold", "length"))


def rerun_pairs(summaries: Sequence[dict], reruns: Sequence[dict], arms: Sequence[str]) -> List[Tuple[dict, dict]]:
    """(committed run, its rerun) for each machine rerun of ``arms`` whose task, arm and seed ``summaries`` hold, in
    ``ARMS`` order and by seed."""
    committed = {run_key(s): s for s in summaries}
    return sorted(((committed[run_key(r)], r) for r in reruns if run_key(r) in committed and r["arm"] in arms),
                  key=lambda pair: (ARMS_ORDER[pair[0]["arm"]], pair[0]["seed"]))


ARMS_ORDER = {arm: index for index, arm in enumerate(ARMS)}


def pair_values(summaries: Sequence[dict], pair: Sequence[str], task: str, seeds: Sequence[int],
                metric: str = "gold") -> Dict[str, List[float]]:
    """Final ``metric`` of each arm of ``pair`` (token PPO, MA-PPO) and of their difference (MA-PPO − token PPO) on
    ``seeds`` of ``task``, keyed by the arm or ``"MA-PPO − token PPO"``'s name (``method − baseline``)."""
    groups = by_arm(summaries, task)
    baseline, method = pair
    values = {arm: [groups[arm][s][metric][-1] for s in seeds] for arm in pair}
    values[f"{method} − {baseline}"] = [m - b for b, m in zip(values[baseline], values[method])]
    return values


def model_seeds_by_machine(summaries: Sequence[dict], pair: Sequence[str], meta: Optional[dict] = None
                           ) -> Dict[str, List[str]]:
    """The tasks (SFT + RM seeds) of the pair's comparison across SFT + RM seeds (:func:`model_seed_comparison`),
    grouped by the one machine all its runs there were made on (``"several machines"`` when they differ), in task
    order."""
    comparison = model_seed_comparison(summaries, pair)
    if not comparison:
        return {}
    tasks = {TASKS[t].model_seed: t for t in ("long", *model_seed_tasks("long"))}
    found: Dict[str, List[str]] = {}
    for model_seed, seeds in zip(comparison.model_seeds, comparison.seeds):
        machines = {machine_name(s, meta) for s in summaries
                    if s["task"] == tasks[model_seed] and s["arm"] in pair and s["seed"] in seeds}
        found.setdefault(machines.pop() if len(machines) == 1 else "several machines", []).append(tasks[model_seed])
    return found


def published_new_seed(summaries: Sequence[dict], task: str, name: str
                       ) -> Optional[Tuple[float, float, Tuple[int, ...]]]:
    """The published 95% interval of a new PPO seed's final gold for ``name`` (an arm of the planned λ = 1 pair or
    their difference) on the long task's own SFT + RM seed: Student's t over the pair's seeds there (the report's
    "Where a new seed would land"); (low, high, seeds), None where the pair has no comparison on ``task``."""
    pair = tuple(MODEL_SEED_PAIRS["long"][0])
    comparison = model_seed_comparison(summaries, pair)
    if not comparison or TASKS[task].model_seed not in comparison.model_seeds or task not in (
            "long", *model_seed_tasks("long")):
        return None
    seeds = comparison.seeds[comparison.model_seeds.index(TASKS[task].model_seed)]
    return (*t_interval(pair_values(summaries, pair, task, seeds)[name], new_seed=True), seeds)


@dataclass(frozen=True)
class NewMachineCheck:
    """The planned λ = 1 pair on the SFT + RM seeds made on ``machine`` (``checked``) against the intervals of a new
    SFT + RM seed estimated from those made on the long task's machine ``home`` (``estimated``): per value (an arm
    or the difference) the fitted :class:`~evaluation.study.stats.NewModelSeed`, the checked runs' finals and each
    checked SFT + RM seed's mean."""

    home: str
    machine: str
    estimated: Tuple[int, ...]
    checked: Tuple[int, ...]
    n: int
    """The PPO seeds per SFT + RM seed the intervals were estimated from (a checked mean is over as many)."""
    values: Dict[str, Tuple[NewModelSeed, List[float], Dict[int, float], List[bool]]]
    """Per value: the fitted intervals, the checked runs' values, each checked SFT + RM seed's mean, and whether each
    checked value comes from a failed run (for the difference: either arm's)."""


def new_machine_checks(summaries: Sequence[dict], meta: Optional[dict] = None) -> List[NewMachineCheck]:
    """One check per machine kind other than the long task's that made SFT + RM seeds of the planned λ = 1 pair's
    comparison (two or more SFT + RM seeds on the long task's machine to estimate from). The intervals come from
    the first n PPO seeds every SFT + RM seed of the long task's machine has (n the fewest there), whatever the
    others have run; every run of the others is checked, and the mean of each that has n PPO seeds (its first n)."""
    pair = tuple(MODEL_SEED_PAIRS["long"][0])
    by_machine = model_seeds_by_machine(summaries, pair, meta)
    home = next((m for m, tasks in by_machine.items() if "long" in tasks), None)
    if not home or len(by_machine[home]) < 2:
        return []
    shared = pair_seeds(summaries, pair)
    n = min(len(shared[t]) for t in by_machine[home])
    values = {task: pair_values(summaries, pair, task, seeds) for task, seeds in shared.items() if seeds}
    checks = []
    for machine, tasks in by_machine.items():
        if machine == home:
            continue
        found = {}
        bad = {t: [[bool(failure(by_arm(summaries, t)[arm][s])) for s in shared[t]] for arm in pair] for t in tasks}
        for name in values["long"]:
            fitted = new_model_seed_interval([values[t][name][:n] for t in by_machine[home]])
            flags = [b if name == pair[0] else m if name == pair[1] else b or m
                     for t in tasks for b, m in zip(*bad[t])]
            found[name] = (fitted, [v for t in tasks for v in values[t][name]],
                           {TASKS[t].model_seed: statistics.fmean(values[t][name][:n]) for t in tasks
                            if len(values[t][name]) >= n}, flags)
        checks.append(NewMachineCheck(home, machine, tuple(TASKS[t].model_seed for t in by_machine[home]),
                                      tuple(TASKS[t].model_seed for t in tasks), n, found))
    return checks


def model_seed_values(summaries: Sequence[dict], comparison: ModelSeedComparison) -> Dict[str, List[List[float]]]:
    """Per arm of the comparison's pair and their difference (:func:`pair_values`), the final ``metric`` per PPO
    seed on each of its SFT + RM seeds (the comparison's seeds there)."""
    tasks = {TASKS[t].model_seed: t for t in ("long", *model_seed_tasks("long"))}
    per_task = [pair_values(summaries, (comparison.baseline, comparison.method), tasks[m], seeds, comparison.metric)
                for m, seeds in zip(comparison.model_seeds, comparison.seeds)]
    return {name: [values[name] for values in per_task] for name in per_task[0]}


WHERE_PUBLISHED = ("\"Where a new seed would land\"", "the core arms' table's *new seed*", "this section")
"""Where :func:`published_arm_interval` finds an arm's interval, in the order it looks."""


def published_arm_interval(summaries: Sequence[dict], task: str, arm: str
                           ) -> Optional[Tuple[float, float, Tuple[int, ...], str]]:
    """The published 95% interval of a new PPO seed's final gold for ``arm`` on ``task`` (its own SFT + RM seed,
    1234), estimated from the committed rows only: "Where a new seed would land"'s (:func:`published_new_seed`) for
    an arm of the planned λ = 1 pair; else the core arms' table's *new seed* cell (Student's t over the seeds the
    arm shares with PPO); else (an arm run on the confirmation's seeds only) the same t over all its seeds, which
    the unseen seeds' section publishes; (low, high, seeds, where, :data:`WHERE_PUBLISHED`), None below 2 seeds."""
    found = published_new_seed(summaries, task, arm) if arm in MODEL_SEED_PAIRS["long"][0] else None
    if found:
        return (*found, WHERE_PUBLISHED[0])
    groups = by_arm(summaries, task)
    if arm not in groups:
        return None
    seeds, where = common_seeds(groups["ppo"], groups[arm]) if "ppo" in groups else [], WHERE_PUBLISHED[1]
    if len(seeds) < 2:
        seeds, where = common_seeds(groups[arm]), WHERE_PUBLISHED[2]
    if len(seeds) < 2:
        return None
    estimate = mean_estimate([groups[arm][s]["gold"][-1] for s in seeds])
    return estimate.new_low, estimate.new_high, tuple(seeds), where


@dataclass(frozen=True)
class UnseenSeed:
    """One unseen seed (``unseen_seeds.jsonl``: a (task, arm, seed) no committed row has, made on ``machine``) against
    its arm's published interval (:func:`published_arm_interval`), estimated on ``estimated_on`` from ``seeds``;
    the step-0 gold (the SFT policy under the evaluation's sampling seed) of the unseen run and of the committed runs
    the interval comes from (one value each where their bits agree), and whether the unseen run's step-0 evaluation
    (RM, gold, length) equals one of theirs bit for bit."""

    task: str
    arm: str
    seed: int
    machine: str
    gold: float
    low: float
    high: float
    seeds: Tuple[int, ...]
    where: str
    estimated_on: str
    step0: float
    committed_step0: Tuple[float, ...]
    step0_equal: bool

    @property
    def inside(self) -> bool:
        return self.low <= self.gold <= self.high


def unseen_seeds(summaries: Sequence[dict], unseen: Sequence[dict], meta: Optional[dict] = None
                 ) -> List[UnseenSeed]:
    """Every unseen seed whose arm has a published interval, by task (short, long), ``ARMS`` order and seed."""
    found = []
    for row in sorted(unseen, key=lambda r: (("short", "long").index(r["task"]) if r["task"] in ("short", "long")
                                             else 2, r["task"], ARMS_ORDER.get(r["arm"], len(ARMS)), r["seed"])):
        interval = published_arm_interval(summaries, row["task"], row["arm"])
        if not interval:
            continue
        low, high, seeds, where = interval
        runs = by_arm(summaries, row["task"])[row["arm"]]
        found.append(UnseenSeed(row["task"], row["arm"], row["seed"], machine_name(row, meta), row["gold"][-1], low,
                                high, seeds, where,
                                "; ".join(sorted({machine_name(runs[s], meta) for s in seeds})), row["gold"][0],
                                tuple(dict.fromkeys(runs[s]["gold"][0] for s in seeds)),
                                any(bits_equal(runs[s], row, upto=0) for s in seeds)))
    return found
