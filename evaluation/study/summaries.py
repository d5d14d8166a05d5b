"""The study's runs as data: one compact summary per finished run (identity, commit, cost, eval curves), grouped by
task, arm and seed, the seeds two arms share, the split into exploration and confirmation seeds, each arm's λ,
the runs that failed, and the merge of committed and fresh summaries."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from dschat.core.machine import machine_line
from evaluation.curves import latest_run
from evaluation.study.design import ARMS, CONFIRMATION_TIERS, LAMBDA_SWEEP, MAPPO_LAMBDA_ARMS, MAPPO_LAMBDAS, METRICS, N_SWEEP
from evaluation.study.stats import collapse_floored, failure
from evaluation.training_summary import read_metrics


def run_summary(run_dir: Path) -> dict:
    """One finished run's compact record: identity, commit, wall and CPU time and its eval curves."""
    marker = json.loads((Path(run_dir) / "study_run.json").read_text())
    records = latest_run(read_metrics(str(run_dir)))
    evals = [r for r in records if METRICS["rm"] in r]
    summary = {key: marker.get(key) for key in ("task", "arm", "seed", "wall_s", "cpu_s", "commit", "finished")}
    if marker.get("started_at"):  # what the pre-registration check reads (evaluation.study.history)
        summary["started_at"] = marker["started_at"]
    if marker.get("machine"):
        summary["machine"] = marker["machine"]
    summary["steps"] = [r["step"] for r in evals]
    for name, key in METRICS.items():
        summary[name] = [round(r[key], 5) for r in evals if key in r]
    summary["length"] = [round(r.get("eval/response_length", math.nan), 2) for r in evals]
    return summary


def collect(out: Path) -> List[dict]:
    """The summaries of every finished run under ``out`` (``TASK/ARM/seedS/study_run.json``)."""
    return [run_summary(marker.parent) for marker in sorted(Path(out).glob("*/*/seed*/study_run.json"))]


def by_arm(summaries: Sequence[dict], task: str) -> Dict[str, Dict[int, dict]]:
    arms: Dict[str, Dict[int, dict]] = {}
    for s in summaries:
        if s["task"] == task:
            arms.setdefault(s["arm"], {})[s["seed"]] = s
    return arms


def common_seeds(*arms: Dict[int, dict]) -> List[int]:
    seeds = sorted(set.intersection(*(set(a) for a in arms)))
    steps = {tuple(a[s]["steps"]) for a in arms for s in seeds}
    if len(steps) > 1:  # runs of different lengths are not comparable point by point
        longest = max(steps, key=len)
        seeds = [s for s in seeds if all(tuple(a[s]["steps"]) == longest for a in arms)]
    return seeds


def sweep_arms(groups: Dict[str, Dict[int, dict]], task: str) -> List[str]:
    """The arms of the table of token PPO's λ against MA-PPO's n (each paired with MA-PPO n = 5); empty when the
    task has too few of them."""
    arms = [a for a in dict.fromkeys(LAMBDA_SWEEP + N_SWEEP + ("mappo-entropy",) + MAPPO_LAMBDA_ARMS.get(task, ()))
            if a in groups]
    return arms if "mappo" in groups and len(arms) >= 3 else []


def arm_lambda(arm: str) -> float:
    """An arm's GAE λ: 0.95 (Table 5) unless its name says otherwise (``...-lam0.99``)."""
    return float(arm.split("lam")[1]) if "-lam" in arm else 0.95


def seed_split(groups: Dict[str, Dict[int, dict]]) -> Tuple[List[int], List[int]]:
    """(exploration seeds, confirmation seeds): the baseline arm's seeds, and the fresh seeds the confirmation's
    first arm ran on beyond them (:data:`evaluation.study.design.CONFIRMATION_TIERS`)."""
    exploration = sorted(groups.get("ppo", {}))
    first = CONFIRMATION_TIERS["long"][0][0]
    return exploration, sorted(set(groups.get(first, {})) - set(exploration))


def mappo_family(groups: Dict[str, Dict[int, dict]], seeds: Sequence[int]) -> List[str]:
    """MA-PPO's arms (every n, the entropy rule, their λ arms) with a run on each of ``seeds``."""
    arms = dict.fromkeys((*N_SWEEP[1:], *MAPPO_LAMBDAS["mappo"], *MAPPO_LAMBDAS["mappo-entropy"]))
    return [a for a in arms if a in groups and set(seeds) <= set(groups[a])]


def token_ppo_family(groups: Dict[str, Dict[int, dict]], seeds: Sequence[int]) -> List[str]:
    return [a for a in LAMBDA_SWEEP if a in groups and set(seeds) <= set(groups[a])]


def floored_groups(groups: Dict[str, Dict[int, dict]]) -> Dict[str, Dict[int, dict]]:
    """The runs with each final gold floored for collapse (:func:`evaluation.study.stats.collapse_floored`)."""
    return {arm: {seed: {**run, "gold": [*run["gold"][:-1], collapse_floored(run["gold"], run["length"])]}
                  for seed, run in runs.items()} for arm, runs in groups.items()}


def failures(groups: Dict[str, Dict[int, dict]]) -> Dict[str, Dict[int, str]]:
    """Per arm, its failed runs by seed, each with why (:func:`evaluation.study.stats.failure`)."""
    found: Dict[str, Dict[int, str]] = {}
    for arm in sorted(groups, key=lambda a: list(ARMS).index(a) if a in ARMS else len(ARMS)):
        for seed, run in sorted(groups[arm].items()):
            if failure(run):
                found.setdefault(arm, {})[seed] = failure(run)
    return found


def failed_cell(groups: Dict[str, Dict[int, dict]], arm: str, seeds: Sequence[int]) -> str:
    """A table's *failed* cell: how many of the arm's runs on ``seeds`` failed, and which seeds."""
    bad = [s for s in seeds if failure(groups[arm][s])]
    return f"{len(bad)}" + (f" (seed{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))})" if bad else "")


def run_key(summary: dict) -> Tuple[str, str, int]:
    return summary["task"], summary["arm"], summary["seed"]


def machine_name(summary: dict, meta: Optional[dict] = None) -> str:
    """The machine a run was made on: its record's line (:func:`dschat.core.machine.machine_line`), or for a run
    that records none, what the study's notes (``study_meta.json``'s ``machines``, by the run's commit) call its
    machine, marked as not recorded."""
    if summary.get("machine"):
        return machine_line(summary["machine"])
    for entry in (meta or {}).get("machines", []):
        if summary.get("commit") in entry["commits"]:
            return f"{entry['known'].split(':')[0]} (not recorded)"
    return "not recorded"


def other_machine_runs(committed: Sequence[dict], fresh: Sequence[dict]) -> List[Tuple[str, str, int]]:
    """The fresh runs whose (task, arm, seed) the committed summaries hold from another machine (or from one they
    do not record, where the fresh one does): a rerun that measures the machine component (:func:`merge_reruns`), never
    a replacement."""
    def line(summary):
        return machine_line(summary["machine"]) if summary.get("machine") else None

    made = {run_key(s): line(s) for s in committed}
    return [run_key(s) for s in fresh if run_key(s) in made and made[run_key(s)] != line(s)]


def merge_reruns(committed: Sequence[dict], reruns: Sequence[dict], fresh: Sequence[dict]) -> List[dict]:
    """The machine reruns (``machine_reruns.jsonl``): the committed reruns with the fresh ones added or put in their
    place (same task, arm, seed and machine), keeping only runs whose (task, arm, seed) ``committed`` holds from
    another machine; sorted by task, arm, seed and machine."""
    kept = set(other_machine_runs(committed, fresh))
    merged = {(*run_key(s), machine_line(s["machine"])): s for s in reruns}
    merged.update({(*run_key(s), machine_line(s["machine"])): s for s in fresh
                   if run_key(s) in kept and s.get("machine")})
    return [merged[key] for key in sorted(merged)]


def merge_unseen(committed: Sequence[dict], unseen: Sequence[dict], fresh: Sequence[dict]) -> List[dict]:
    """The unseen seeds (``unseen_seeds.jsonl``): the filed ones with the fresh ones added, sorted by task, arm and
    seed. Each is a (task, arm, seed) no committed row has, recording its machine, so that the published intervals
    stay estimated without it; a fresh run whose (task, arm, seed) ``committed`` holds, one without its machine, or
    one whose (task, arm, seed) the file holds with other numbers is an error (the same row filed again is not)."""
    held = {run_key(s) for s in committed}
    filed = {run_key(s): s for s in unseen}
    for s in fresh:
        name = "/".join(map(str, run_key(s)))
        if run_key(s) in held:
            raise ValueError(f"{name} is a committed row of runs.jsonl, not an unseen seed")
        if not s.get("machine"):
            raise ValueError(f"{name} does not record its machine")
        if filed.get(run_key(s), s) != s:
            raise ValueError(f"{name} is filed already with other numbers")
        filed[run_key(s)] = s
    return [filed[key] for key in sorted(filed)]


def merge_runs(committed: Sequence[dict], fresh: Sequence[dict]) -> List[dict]:
    """The committed summaries with the freshly collected ones added or put in their place (same task, arm and
    seed), sorted by task, arm and seed: runs made elsewhere are kept, runs made here win. A fresh run that would
    replace a committed one made on another machine is an error (:func:`other_machine_runs`: a machine rerun goes
    to ``machine_reruns.jsonl``)."""
    clash = other_machine_runs(committed, fresh)
    if clash:
        raise ValueError(f"{len(clash)} fresh runs (first: {'/'.join(map(str, clash[0]))}) repeat committed runs made "
                         "on another machine; `python -m evaluation.study reruns` files them as machine reruns")
    merged = {(s["task"], s["arm"], s["seed"]): s for s in committed}
    merged.update({(s["task"], s["arm"], s["seed"]): s for s in fresh})
    return [merged[key] for key in sorted(merged)]


def merge_meta(committed: Optional[dict], fresh: dict) -> dict:
    """The runner's starts of both, without repeats, in order; the committed notes (history, machines) kept."""
    starts = list((committed or {}).get("starts", []))
    return {**(committed or {}), "starts": starts + [start for start in fresh.get("starts", []) if start not in starts]}
