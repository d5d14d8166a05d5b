"""The report's tables of ``positions.jsonl`` (written by :mod:`evaluation.study.positions`): per arm, where the
long responses changed, set against the study's own evaluation, and the noise of the evaluation's sampling seed."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from evaluation.study.design import ARMS, CONFIRMATION_TIERS
from evaluation.study.stats import Paired, mean_estimate, paired_difference


POSITION_KEYS = {"opening": "opening sentence's sentiment", "first_third": "gold, first third",
                 "last_third": "gold, last third"}


LENGTH_KEYS = {"sentences": "sentences", "gold": "gold, whole response", "gold_first3": "gold, first 3 sentences",
               "gold_first10": "gold, first 10 sentences"}


REPORT_SAMPLE_SEED = 4321
"""The positions sampling seed every policy shares (:data:`evaluation.study.positions.SEED`); lines of other
sampling seeds measure the evaluation's own sampling noise."""


FRESH = " (fresh seeds)"


def position_groups(records: Sequence[dict], fresh_seeds: Sequence[int] = ()) -> Dict[str, List[dict]]:
    """``positions.jsonl`` lines of the shared sampling seed, per policy, in the arms' order; the runs of
    ``fresh_seeds`` (the confirmation, made on another machine) apart from the exploration's, as ``ARM (fresh
    seeds)``."""
    arms: Dict[str, List[dict]] = {}
    for record in records:
        if record.get("sample_seed", REPORT_SAMPLE_SEED) in (REPORT_SAMPLE_SEED, None):
            arms.setdefault(record["arm"] + (FRESH if record["seed"] in fresh_seeds else ""), []).append(record)
    order = ["chosen", "sft", *ARMS, *(arm + FRESH for arm in ARMS)]
    return {arm: arms[arm] for arm in order if arm in arms}


def position_cell(rows: Sequence[dict], key: str, digits: int = 3) -> str:
    values = [r[key] for r in rows if key in r]
    if not values:
        return "—"
    return mean_estimate(values).text(digits) if len(values) > 1 else f"{values[0]:.{digits}f}"


def position_lines(records: Sequence[dict], fresh_seeds: Sequence[int] = (), summaries: Sequence[dict] = ()
                   ) -> List[str]:
    """Tables of ``positions.jsonl`` (:mod:`evaluation.study.positions`): per arm, where the response changed, and
    its gold score whole and on its first sentences (length-controlled); the evaluation's sampling noise where
    several sampling seeds were drawn."""
    arms = position_groups(records, fresh_seeds)
    lines = ["#### Where the long responses changed (`python -m evaluation.study_positions`)", "",
             "Final actors, one sample per held-out prompt (128, T = 0.8, the same noise for every policy); the "
             "opening sentence is the early decision (100+ tokens before the reward). Seed mean [t CI]; *chosen*: the "
             "held-out chosen responses themselves.",
             "", "| policy | runs | " + " | ".join(POSITION_KEYS.values()) + " |",
             "|---|---|" + "---|" * len(POSITION_KEYS)]
    for arm, rows in arms.items():
        if arm != "chosen":
            lines.append(f"| {arm} | {len(rows) if arm != 'sft' else '—'} | "
                         + " | ".join(position_cell(rows, key) for key in POSITION_KEYS) + " |")
    measured = {arm: [r for r in rows if "gold" in r] for arm, rows in arms.items()}
    measured = {arm: rows for arm, rows in measured.items() if rows}
    if measured:
        lines += ["", "#### Gold with and without length's share", "",
                  "The gold score is the share of sentiment words (positive − negative over all words), and this "
                  "task's opening sentences carry more of them than the rest, so the same policy scores higher on "
                  "shorter responses. Beside each final actor's whole-response gold, the gold of its first 3 and first "
                  "10 sentences compares policies on the same number of sentences. Same samples as above; only the "
                  "actors measured on this machine (the others' lines predate these columns).", "",
                  "| policy | runs | " + " | ".join(LENGTH_KEYS.values()) + " |", "|---|---|" + "---|" * len(LENGTH_KEYS)]
        for arm, rows in measured.items():
            lines.append(f"| {arm} | {len(rows) if arm not in ('sft', 'chosen') else '—'} | "
                         + " | ".join(position_cell(rows, key, 1 if key == "sentences" else 3) for key in LENGTH_KEYS)
                         + " |")
    noise = sampling_noise(records)
    if noise:
        lines += ["", "#### The evaluation's own sampling noise", "",
                  "Final actors drawn again with other sampling seeds (same 128 prompts): the standard deviation of "
                  "their whole-response gold across sampling seeds (mean over the actors) against its standard "
                  "deviation across PPO seeds (one sampling seed).", "",
                  "| policy | actors | sampling seeds | SD across sampling seeds | SD across PPO seeds |",
                  "|---|---|---|---|---|"]
        for arm, (actors, draws, within, between) in noise.items():
            lines.append(f"| {arm} | {actors} | {draws} | {within:.4f} | {between:.4f} |")
    by_draw = sampling_seed_comparison(records)
    if by_draw:
        lines += ["", sampling_seed_text(by_draw, positions_against_runs(records, summaries))]
    return lines + [""]


def positions_against_runs(records: Sequence[dict], summaries: Sequence[dict], key: str = "gold"
                           ) -> Optional[Tuple[int, float, float]]:
    """The positions' draw at :data:`REPORT_SAMPLE_SEED` against the study's own evaluation of the same final actor
    (``runs.jsonl``'s final gold, long task): (actors both measured, SD and mean of positions − runs); None without
    two such actors."""
    finals = {(s["arm"], s["seed"]): s[key][-1] for s in summaries if s["task"] == "long"}
    offsets = [r[key] - finals[r["arm"], r["seed"]] for r in records
               if r.get("sample_seed") == REPORT_SAMPLE_SEED and key in r and (r["arm"], r["seed"]) in finals]
    return (len(offsets), statistics.stdev(offsets), statistics.fmean(offsets)) if len(offsets) > 1 else None


@dataclass(frozen=True)
class SamplingSeedComparison:
    """The planned λ = 1 pair (``method`` − ``baseline``, whole-response gold of the final actors, paired by PPO
    seed) under each sampling seed both were drawn with, and on each actor's mean over those draws (an interval
    over PPO seeds that averages the evaluation sample's noise)."""

    baseline: str
    method: str
    per_sample_seed: Dict[int, Paired]
    averaged: Paired


def sampling_seed_comparison(records: Sequence[dict], key: str = "gold") -> Optional[SamplingSeedComparison]:
    """On the PPO seeds whose actors of both arms of the first confirmation tier were drawn more than once, under
    the sampling seeds all of them share; None unless two PPO seeds and two sampling seeds are left."""
    baseline, method = CONFIRMATION_TIERS["long"][0]
    draws: Dict[Tuple[str, int], Dict[int, float]] = {}
    for r in records:
        if r["arm"] in (baseline, method) and key in r and r.get("sample_seed") is not None:
            draws.setdefault((r["arm"], r["seed"]), {})[r["sample_seed"]] = r[key]
    redrawn = {key for key, found in draws.items() if len(found) > 1}
    seeds = sorted({s for a, s in redrawn if a == baseline} & {s for a, s in redrawn if a == method})
    sample_seeds = sorted(set.intersection(*(set(draws[a, s]) for s in seeds for a in (baseline, method)))) \
        if seeds else []
    if len(seeds) < 2 or len(sample_seeds) < 2:
        return None

    def values(arm, sample_seed=None):
        return [draws[arm, s][sample_seed] if sample_seed is not None
                else statistics.fmean(draws[arm, s][d] for d in sample_seeds) for s in seeds]

    return SamplingSeedComparison(baseline, method,
                                  {d: paired_difference(values(baseline, d), values(method, d)) for d in sample_seeds},
                                  paired_difference(values(baseline), values(method)))


def sampling_seed_text(found: SamplingSeedComparison, offset: Optional[Tuple[int, float, float]] = None) -> str:
    per_draw = "; ".join(f"sampling seed {d}: {p.diff.mean:+.4f} ({p.ahead}/{p.diff.n})"
                         for d, p in found.per_sample_seed.items())
    text = (f"{found.method} − {found.baseline}, final actors' whole-response gold paired by PPO seed, under each "
            f"sampling seed: {per_draw}; each actor averaged over the {len(found.per_sample_seed)} draws: "
            f"{found.averaged.diff.text(4)} ({found.averaged.ahead}/{found.averaged.diff.n}).")
    if offset:
        actors, sd, mean = offset
        text += (f" Sampling seed {REPORT_SAMPLE_SEED} here is the positions script's draw, not the study's own "
                 f"evaluation (`--eval_seed {REPORT_SAMPLE_SEED}` inside training): over the {actors} final actors "
                 f"both measured, its gold minus runs.jsonl's final gold has SD {sd:.4f} (mean {mean:+.4f}), so these "
                 "draws are three further samples beside the evaluation's, and the evaluation's own draw is a fourth "
                 "whose noise they estimate but do not remove.")
    return text


def sampling_noise(records: Sequence[dict], key: str = "gold") -> Dict[str, Tuple[int, int, float, float]]:
    """Per arm with actors drawn at several sampling seeds: (actors, sampling seeds, mean over actors of the SD of
    ``key`` across sampling seeds, SD of ``key`` across actors at the shared seed)."""
    draws: Dict[Tuple[str, int], Dict[int, float]] = {}
    for r in records:
        if key in r and r.get("sample_seed") is not None:
            draws.setdefault((r["arm"], r["seed"]), {})[r["sample_seed"]] = r[key]
    found = {}
    for arm in dict.fromkeys(a for a, _ in draws):
        actors = {seed: d for (a, seed), d in draws.items() if a == arm and len(d) > 1}
        if not actors or arm == "sft":
            continue
        within = statistics.fmean(statistics.stdev(d.values()) for d in actors.values())
        shared = [d[REPORT_SAMPLE_SEED] for d in actors.values() if REPORT_SAMPLE_SEED in d]
        between = statistics.stdev(shared) if len(shared) > 1 else math.nan
        found[arm] = (len(actors), min(len(d) for d in actors.values()), within, between)
    return found
