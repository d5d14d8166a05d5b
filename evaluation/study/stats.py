"""The study's statistics, pure functions over per-seed values: equivalence (TOST) within a margin fixed before the
deciding runs, Holm's correction within a family, "best against best" with the best arms chosen on other seeds than
they are compared on, a paired difference over PPO seeds nested in SFT + RM seeds (:func:`across_model_seeds`, the one
interval that covers the SFT + RM seed: :data:`evaluation.study.design.VARIATION_COVERED`), the failed-run rule, and
the report's estimates (also :mod:`evaluation.pipeline_record`'s): per arm and metric the seed mean with Student's t
and the percentile-bootstrap interval (which under-covers with 8 seeds) and the t prediction interval of one new seed
(s·√(1 + 1/n)); paired differences (method − baseline, same seed) likewise, with the seeds ahead; the area under the
eval curve (trapezoid, the mean level); the last quarter's change (least-squares slope × its length); and parity
(paper §4.2, Fig. 2) on the seed-averaged EMA-smoothed curves (:func:`evaluation.curves.ema`): the first step the
baseline reaches its final smoothed level over the first step the method does, a point estimate."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import stats as scipy_stats

from evaluation.curves import Series, ema, first_crossing_step

ALPHA = 0.05


LEVEL = 0.95
"""The confidence level of every two-sided interval the study reports."""


COLLAPSE_FRACTION = 0.5
"""A run collapses when its eval response length falls below this fraction of its length at step 0 (the SFT
policy's) at any evaluation; it 'ends collapsed' when its final length is still below it."""


def format_p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _standard_error(values: Sequence[float]) -> Tuple[float, float, int]:
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values))), len(values)


def t_interval(values: Sequence[float], level: float = LEVEL, new_seed: bool = False) -> Tuple[float, float]:
    """Student's t interval over seeds: for the mean (mean ± t·s/√n), or with ``new_seed`` the prediction
    interval of one further seed's value (mean ± t·s·√(1 + 1/n)); NaNs with fewer than two values."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    half = scipy_stats.t.ppf((1 + level) / 2, n - 1) * values.std(ddof=1) * math.sqrt((1 if new_seed else 0) + 1 / n)
    return float(values.mean() - half), float(values.mean() + half)


def paired_t_p(diffs: Sequence[float]) -> float:
    """Two-sided p of the one-sample t test that the mean paired difference is 0 (1.0 when every difference is
    0; 0.0 when they are equal and non-zero)."""
    mean, se, n = _standard_error(diffs)
    if se == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * scipy_stats.t.sf(abs(mean) / se, n - 1))


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests of |mean difference| < ``margin``: ``p`` = the larger one-sided p; equivalent at level α
    exactly when the (1 − 2α) t interval ``[low, high]`` lies inside ±margin."""

    mean: float
    low: float
    high: float
    margin: float
    p: float
    holm: bool = False
    """``p`` is Holm-adjusted within the test's family (:func:`adjust_families`); the 90% interval is not."""

    @property
    def equivalent(self) -> bool:
        return self.p < ALPHA

    def text(self, digits: int = 3) -> str:
        verdict = "equivalent" if self.equivalent else "not shown equivalent"
        return (f"90% CI [{self.low:.{digits}f}, {self.high:.{digits}f}] vs ±{self.margin:g}: {verdict} "
                f"({'Holm-adjusted ' if self.holm else ''}TOST p = {format_p(self.p)})")

    def flipped(self) -> "Equivalence":
        """The same test of the difference the other way round (baseline − method)."""
        return Equivalence(-self.mean, -self.high, -self.low, self.margin, self.p, self.holm)


def tost(diffs: Sequence[float], margin: float) -> Equivalence:
    """Two one-sided t tests (Schuirmann 1987) on paired differences: H0 mean ≤ −margin and H0 mean ≥ margin."""
    mean, se, n = _standard_error(diffs)
    if se == 0:
        p = 0.0 if abs(mean) < margin else 1.0
        return Equivalence(mean, mean, mean, margin, p)
    p_low = scipy_stats.t.sf((mean + margin) / se, n - 1)   # against mean <= -margin
    p_high = scipy_stats.t.cdf((mean - margin) / se, n - 1)  # against mean >= +margin
    half = scipy_stats.t.ppf(1 - ALPHA, n - 1) * se
    return Equivalence(mean, mean - half, mean + half, margin, float(max(p_low, p_high)))


def seeds_for_equivalence(diffs: Sequence[float], margin: float, alpha: float = ALPHA,
                          limit: int = 1000) -> Optional[int]:
    """The smallest number of seeds at which :func:`tost` would show equivalence if further seeds kept the observed
    mean and standard deviation of ``diffs`` (the (1 − 2·alpha) t half-width below margin − |mean|; ``alpha`` below α
    for a test Holm-adjusted in a family: α/m is enough whatever the others); None when the observed mean is not
    inside the margin or ``limit`` seeds would not do."""
    mean, se, n = _standard_error(diffs)
    room, sd = margin - abs(mean), se * math.sqrt(n)
    if room <= 0:
        return None
    for seeds in range(2, limit + 1):
        if scipy_stats.t.ppf(1 - alpha, seeds - 1) * sd / math.sqrt(seeds) < room:
            return seeds
    return None


def holm(pvalues: Mapping[str, float]) -> Dict[str, float]:
    """Holm's step-down adjusted p-values (family-wise error ≤ α when each is compared with α): sorted ascending,
    the i-th (from 0) is multiplied by (m − i), made monotone, capped at 1."""
    order = sorted(pvalues, key=pvalues.get)
    adjusted, running = {}, 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * pvalues[name]))
        adjusted[name] = running
    return adjusted


@dataclass(frozen=True)
class AdjustedTest:
    """One paired comparison after the study's one multiplicity rule: its family, the two-sided t test's p raw and
    Holm-adjusted, and its equivalence test (TOST) with the p Holm-adjusted over the same family."""

    family: str
    p: float
    p_holm: float
    equivalence: Equivalence


def adjust_families(families: Mapping[str, Mapping[Hashable, Tuple[Sequence[float], float]]]
                    ) -> Dict[Hashable, AdjustedTest]:
    """``families[name][key] = (paired differences, equivalence margin)``; within each family Holm's correction
    (:func:`holm`) is applied to the difference tests' p-values and, separately, to the TOST p-values, so a
    difference and an equivalence are claimed under the same family-wise error rate α. A key in two families is an
    error (each test belongs to one)."""
    found: Dict[Hashable, AdjustedTest] = {}
    for name, tests in families.items():
        if not tests:
            continue
        clash = [key for key in tests if key in found]
        if clash:
            raise ValueError(f"test {clash[0]!r} is in families {found[clash[0]].family!r} and {name!r}")
        raw = {key: (paired_t_p(diffs), tost(diffs, margin)) for key, (diffs, margin) in tests.items()}
        p_holm = holm({key: p for key, (p, _) in raw.items()})
        tost_holm = holm({key: e.p for key, (_, e) in raw.items()})
        for key, (p, e) in raw.items():
            found[key] = AdjustedTest(name, p, p_holm[key],
                                      Equivalence(e.mean, e.low, e.high, e.margin, tost_holm[key], True))
    return found


@dataclass(frozen=True)
class HeldOutFold:
    select_seeds: Tuple[int, ...]
    test_seeds: Tuple[int, ...]
    best_a: str
    best_b: str
    diffs: Tuple[float, ...]
    """best_b − best_a on each test seed (paired)."""


def best_arm(finals: Mapping[str, Mapping[int, float]], arms: Sequence[str], seeds: Sequence[int]) -> str:
    """The arm with the highest mean final score over ``seeds`` (ties: the first in ``arms``)."""
    return max(arms, key=lambda arm: (float(np.mean([finals[arm][s] for s in seeds])), -list(arms).index(arm)))


def held_out_best_vs_best(finals: Mapping[str, Mapping[int, float]], family_a: Sequence[str],
                          family_b: Sequence[str], seeds: Sequence[int],
                          outcome: Optional[Mapping[str, Mapping[int, float]]] = None) -> List[HeldOutFold]:
    """Two-fold cross-fitting: the seeds split into a first and a second half; each family's best arm (by
    ``finals``) is chosen on one half and compared (family b − family a, paired by seed, on ``outcome``, default
    ``finals``) on the other, both ways. The pooled differences are free of the optimism of choosing a best arm
    and scoring it on the same runs."""
    seeds = sorted(seeds)
    outcome = finals if outcome is None else outcome
    half = len(seeds) // 2
    first, second = tuple(seeds[:half]), tuple(seeds[half:])
    folds = []
    for select, test in ((first, second), (second, first)):
        a, b = best_arm(finals, family_a, select), best_arm(finals, family_b, select)
        folds.append(HeldOutFold(select, test, a, b, tuple(outcome[b][s] - outcome[a][s] for s in test)))
    return folds


@dataclass(frozen=True)
class AcrossModelSeeds:
    """A paired difference measured on several SFT + RM seeds, each with its own PPO seeds (the model
    d = μ + a_model_seed + e_ppo_seed): the grand mean of the per-model-seed means, whose variance σ_a²/S + σ_e²/(S·n)
    the spread of those S means estimates without bias, so its t interval (S − 1 degrees of freedom) covers both
    seeds. ``within_sd``: the PPO seeds' standard deviation of d (pooled over model seeds); ``between_sd``: the model
    seed's, by the method of moments (var of the means − within² / n, floored at 0); ``p_differ``: one-way ANOVA
    that the model seeds' true means are equal; ``p_rank``: the Kruskal-Wallis rank test of the same (one wild run
    inflates the ANOVA's within-seed variance, not the ranks)."""

    means: Tuple[float, ...]
    mean: float
    low: float
    high: float
    within_sd: float
    between_sd: float
    p_differ: float
    p_rank: float
    equivalence: Equivalence


def across_model_seeds(diffs: Sequence[Sequence[float]], margin: float, level: float = LEVEL) -> AcrossModelSeeds:
    """``diffs[k]``: the paired differences (one per PPO seed, as many on every model seed) on model seed k."""
    groups = [np.asarray(d, dtype=float) for d in diffs]
    if len(groups) < 2 or len({len(g) for g in groups}) != 1 or len(groups[0]) < 2:
        raise ValueError("need at least two model seeds with the same number (at least two) of PPO seeds each")
    means = np.array([g.mean() for g in groups])
    n = len(groups[0])
    within = float(np.mean([g.var(ddof=1) for g in groups]))
    return AcrossModelSeeds(tuple(float(m) for m in means), float(means.mean()), *t_interval(means, level),
                            math.sqrt(within),
                            math.sqrt(max(0.0, float(means.var(ddof=1)) - within / n)),
                            float(scipy_stats.f_oneway(*groups).pvalue), float(scipy_stats.kruskal(*groups).pvalue),
                            tost(means, margin))


@dataclass(frozen=True)
class NewModelSeed:
    """Where a value lands on an SFT + RM seed not yet trained (normal model v = μ + a_model_seed + e_ppo_seed, S model
    seeds of n PPO seeds each): ``mean_low/high``, the t prediction interval of that model seed's mean over n PPO
    seeds (the S means are i.i.d. with variance σ_a² + σ_e²/n: m̄ ± t(S−1)·s_m·√(1 + 1/S)); ``run_low/high``, of
    one run there (variance σ_a² + σ_e², estimated by s_m² + s_w²·(1 − 1/n) with s_w² the pooled within-model-seed
    variance; same t quantile)."""

    mean: float
    mean_low: float
    mean_high: float
    run_low: float
    run_high: float
    model_seeds: int


def new_model_seed_interval(values: Sequence[Sequence[float]], level: float = LEVEL) -> NewModelSeed:
    """``values[k]``: one value per PPO seed on model seed k (as many on every model seed, two or more)."""
    groups = [np.asarray(v, dtype=float) for v in values]
    if len(groups) < 2 or len({len(g) for g in groups}) != 1 or len(groups[0]) < 2:
        raise ValueError("need at least two model seeds with the same number (at least two) of PPO seeds each")
    means = np.array([g.mean() for g in groups])
    s, n = len(groups), len(groups[0])
    t = scipy_stats.t.ppf((1 + level) / 2, s - 1)
    between = float(means.var(ddof=1))
    within = float(np.mean([g.var(ddof=1) for g in groups]))
    half_mean = t * math.sqrt(between * (1 + 1 / s))
    half_run = t * math.sqrt(between * (1 + 1 / s) + within * (1 - 1 / n))
    centre = float(means.mean())
    return NewModelSeed(centre, centre - half_mean, centre + half_mean, centre - half_run, centre + half_run, s)


@dataclass(frozen=True)
class Collapse:
    start: float
    lowest: float
    lowest_step: int
    final: float

    @property
    def collapsed(self) -> bool:
        return self.lowest < COLLAPSE_FRACTION * self.start

    @property
    def ends_collapsed(self) -> bool:
        return self.final < COLLAPSE_FRACTION * self.start

    def text(self) -> str:
        return (f"{self.start:.0f} → {self.lowest:.0f} at step {self.lowest_step}, final {self.final:.0f}"
                + (" (ends collapsed)" if self.ends_collapsed else ""))


def collapse_floored(gold: Sequence[float], lengths: Sequence[float]) -> float:
    """A run's final gold, floored for collapse: a run that ends collapsed (final eval length below
    :data:`COLLAPSE_FRACTION` of its step-0 length) scores its step-0 gold (the SFT policy's: no gain), since a
    policy that answers in a few tokens has stopped doing the task even where the share of sentiment words is high."""
    return float(gold[0] if lengths[-1] < COLLAPSE_FRACTION * lengths[0] else gold[-1])


FAILED_RULE = ("a run *failed* when it ends collapsed (final eval length below half its step-0 length) or diverged "
               "(final RM score or final gold below its own step 0's, the SFT policy's): each is a final policy worse "
               "than the one it started from — on the score it optimised, on the task, or no longer doing the task "
               "— and the RM's own step 0 is the only baseline that holds across reward models; both scores count, "
               "since a reward model can be exploited while gold falls, and gold can rise while a run has collapsed")


def failure(run: Mapping) -> str:
    """Why a run (a summary: ``length``, ``rm``, ``gold`` at every evaluation) failed (:data:`FAILED_RULE`): the
    reasons joined ("collapsed", "RM below step 0", "gold below step 0"), "" when it did not."""
    return ", ".join(reason for reason, hit in (
        ("collapsed", run["length"][-1] < COLLAPSE_FRACTION * run["length"][0]),
        ("RM below step 0", run["rm"][-1] < run["rm"][0]),
        ("gold below step 0", run["gold"][-1] < run["gold"][0])) if hit)


def few_df(df: int) -> str:
    """The label of an interval with fewer than 5 degrees of freedom ("" otherwise)."""
    return f" ({df} degrees of freedom, fewer than 5: wide and fragile)" if df < 5 else ""


def collapse(steps: Sequence[int], lengths: Sequence[float]) -> Optional[Collapse]:
    """The run's length trajectory when it falls below :data:`COLLAPSE_FRACTION` of its step-0 length at some
    evaluation; None otherwise."""
    lowest = int(np.argmin(lengths[1:])) + 1 if len(lengths) > 1 else 0
    found = Collapse(float(lengths[0]), float(lengths[lowest]), int(steps[lowest]), float(lengths[-1]))
    return found if found.collapsed else None


N_BOOT = 10000


SMOOTHING = 0.6


def resample_indices(n: int, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """``[n_boot, n]`` seed indices drawn with replacement (the same draws for every statistic of a table)."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def bootstrap_mean_ci(values: Sequence[float], indices: Optional[np.ndarray] = None,
                      level: float = LEVEL) -> Tuple[float, float]:
    """The central ``level`` percentile interval (numpy's linear interpolation) of the mean of ``values`` over the
    resamples ``indices``."""
    values = np.asarray(values, dtype=float)
    indices = resample_indices(len(values)) if indices is None else indices
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values[indices].mean(axis=1), [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Estimate:
    """A seed mean with its 95% percentile-bootstrap interval (``low``, ``high``), t interval and the
    prediction interval of a new seed."""

    mean: float
    low: float
    high: float
    n: int
    t_low: float = math.nan
    t_high: float = math.nan
    new_low: float = math.nan
    new_high: float = math.nan

    def text(self, digits: int = 3) -> str:
        """``mean [t interval]`` (the bootstrap interval where fewer than two seeds leave no t interval)."""
        low, high = (self.low, self.high) if math.isnan(self.t_low) else (self.t_low, self.t_high)
        return f"{self.mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    def cells(self, digits: int = 3) -> str:
        """Table cells: mean, t interval, bootstrap interval, prediction interval of a new seed."""
        def pair(low, high):
            return f"[{low:.{digits}f}, {high:.{digits}f}]"

        return (f"{self.mean:.{digits}f} | {pair(self.t_low, self.t_high)} | {pair(self.low, self.high)} | "
                f"{pair(self.new_low, self.new_high)}")


def mean_estimate(values: Sequence[float], indices: Optional[np.ndarray] = None) -> Estimate:
    return Estimate(statistics.fmean(values), *bootstrap_mean_ci(values, indices), len(values),
                    *t_interval(values), *t_interval(values, new_seed=True))


@dataclass(frozen=True)
class Paired:
    """method - baseline per seed: the mean difference with its bootstrap CI, and seeds where method is ahead."""

    diff: Estimate
    ahead: int


def paired_difference(baseline: Sequence[float], method: Sequence[float],
                      indices: Optional[np.ndarray] = None) -> Paired:
    """Paired by seed: ``baseline[i]`` and ``method[i]`` are the same seed."""
    if len(baseline) != len(method):
        raise ValueError("paired difference needs one baseline value per method value")
    diffs = [m - b for b, m in zip(baseline, method)]
    return Paired(mean_estimate(diffs, indices), sum(d > 0 for d in diffs))


def area_under_curve(steps: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoid area under the eval curve divided by the step range: the curve's mean level over training."""
    if len(steps) < 2:
        return float(values[0])
    area = sum((s1 - s0) * (v0 + v1) / 2 for s0, s1, v0, v1 in zip(steps, steps[1:], values, values[1:]))
    return area / (steps[-1] - steps[0])


@dataclass(frozen=True)
class ParityResult:
    target: float
    baseline_step: Optional[float]
    method_step: Optional[float]
    speedup: Optional[float]


def smoothed_mean_curve(steps: Sequence[float], curves: Sequence[Sequence[float]],
                        smoothing: float = SMOOTHING) -> Series:
    """Mean over seeds (curves on the same ``steps``), then the bias-corrected EMA."""
    mean = np.asarray(curves, dtype=float).mean(axis=0)
    return Series(tuple(steps), ema(mean.tolist(), smoothing))


def parity(steps: Sequence[float], baseline: Sequence[Sequence[float]], method: Sequence[Sequence[float]],
           smoothing: float = SMOOTHING) -> ParityResult:
    """Parity speed-up on the seed-averaged, smoothed curves: the baseline's final smoothed level is the target;
    the speed-up is (first step the baseline reaches it) / (first step the method does)."""
    base, meth = smoothed_mean_curve(steps, baseline, smoothing), smoothed_mean_curve(steps, method, smoothing)
    target = base.values[-1]
    base_step, method_step = first_crossing_step(base, target), first_crossing_step(meth, target)
    speedup = base_step / method_step if method_step else None
    return ParityResult(target, base_step, method_step, speedup)


def last_quarter_change(steps: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of the curve over its last quarter of steps (at least its last two evaluations), times
    that quarter's length: how much the curve still moved at the end of training."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    start = steps[-1] - (steps[-1] - steps[0]) / 4
    keep = steps >= start
    if keep.sum() < 2:
        keep[-2:] = True
    slope = np.polyfit(steps[keep], values[keep], 1)[0]
    return float(slope * (steps[-1] - start))
