"""The study's report: statistics over seeds of the runs :mod:`evaluation.study.runner` trained.

    python -m evaluation.study report --out outputs/study --report_dir docs/study

Writes ``REPORT_DIR/runs.jsonl`` (one compact line per finished run: identity, commit, cost and its eval
curves, RM, gold and length; every number of the report is recomputed from it by
``python -m evaluation.study_report REPORT_DIR/runs.jsonl``), ``study_meta.json`` (the runner's command, commit
and package versions), ``README.md`` (the tables) and the figures.

The statistics live in :mod:`evaluation.study.stats`, the decisions they feed in :mod:`evaluation.study.decisions`,
the report's sections in :mod:`evaluation.study.tables` and :mod:`evaluation.study.position_report`; this module
assembles them with the study's provenance (commit, machine, cost, history) and writes the files."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from dschat.core.entrypoint import ArgumentParser
from dschat.core.machine import machine_line
from evaluation.study.decisions import model_seeds_by_machine, multiplicity
from evaluation.study.design import (ABLATION_ARMS, ARMS, CORE_ARMS, MAPPO_LAMBDA_ARMS, MINI_BATCH_ARMS,
                                     MODEL_SEED_PAIRS, SWEEP_ARMS, TASK_TITLES, VARIATION_COVERED)
from evaluation.study.history import history_lines, registration_lines
from evaluation.study.plots import plot_main
from evaluation.study.position_report import position_lines
from evaluation.study.summaries import (by_arm, collect, merge_meta, merge_reruns, merge_runs, merge_unseen,
                                        other_machine_runs, seed_split)
from evaluation.study.tables import (confirmation_lines, confirmation_table, convergence_lines, failure_lines,
                                     family_lines, machine_component_lines, model_seed_lines, new_seed_lines,
                                     not_run_lines, readme_table, table, unseen_seed_lines, verdict_lines)

ASYNC_RUNS = "async/runs.jsonl"
"""The asynchronous-rollout check's runs, beside the study's folder (``docs/async/runs.jsonl``)."""


def read_jsonl(path: Path) -> List[dict]:
    """The records of a JSON-lines file (none when it is missing)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()] \
        if Path(path).is_file() else []


RERUNS = "machine_reruns.jsonl"
"""Beside ``runs.jsonl``: runs of committed (task, arm, seed)s trained again on another machine kind, one summary
each (machine recorded); the report's machine component (:func:`evaluation.study.tables.machine_component_lines`)."""

UNSEEN = "unseen_seeds.jsonl"
"""Beside ``runs.jsonl``: runs of a (task, arm, seed) no committed row has, made on another machine kind, one summary
each (machine recorded), never joining the rows the intervals are estimated from; the report checks them against the
published intervals (:func:`evaluation.study.tables.unseen_seed_lines`)."""


def provenance_lines(summaries: Sequence[dict], meta: Optional[dict], reruns: Sequence[dict] = (),
                     unseen: Sequence[dict] = ()) -> List[str]:
    """Which code made the runs (the commits in their markers) and how the runner was started."""
    commits: Dict[str, int] = {}
    for s in summaries:
        commits[s.get("commit") or "unrecorded"] = commits.get(s.get("commit") or "unrecorded", 0) + 1
    lines = ["Runs by commit: " + ", ".join(f"`{c}` ({n} runs)" for c, n in commits.items()) + "."]
    if meta and meta.get("starts"):
        start = meta["starts"][-1]
        packages = ", ".join(f"{k} {v}" for k, v in start["packages"].items() if v)
        lines += [f"Runner: `{start['command']}` (last of {len(meta['starts'])} starts, commit `{start['commit']}`), "
                  f"Python {start['python']}, {packages}."]
    return lines + [""] + machine_lines(summaries, meta, reruns, unseen)


def runs_by_machine(rows: Sequence[dict]) -> str:
    """How many of ``rows`` (each recording its machine) were made on each machine: "N on LINE; ..."."""
    made: Dict[str, int] = {}
    for s in rows:
        made[machine_line(s["machine"])] = made.get(machine_line(s["machine"]), 0) + 1
    return "; ".join(f"{n} on {line}" for line, n in made.items())


def machine_lines(summaries: Sequence[dict], meta: Optional[dict], reruns: Sequence[dict] = (),
                  unseen: Sequence[dict] = ()) -> List[str]:
    """The machines the runs were made on: the record a run row carries (``machine``, written by the runner since
    it records :func:`dschat.core.machine.machine_record`), and for the rows without one what the study's notes
    know (``study_meta.json``'s ``machines``)."""
    recorded = runs_by_machine([s for s in summaries if s.get("machine")])
    bare = [s for s in summaries if not s.get("machine")]
    lines = ["#### Machines", ""]
    if recorded:
        lines += ["Runs that record their machine: " + recorded + "."]
    if bare:
        known = []
        for entry in (meta or {}).get("machines", []):
            runs = sum(s.get("commit") in entry["commits"] for s in bare)
            if runs:
                known.append(f"{runs} runs at {', '.join(f'`{c}`' for c in entry['commits'])}: {entry['known']}")
        lines += [f"{len(bare)} of {len(summaries)} runs do not record their machine (the runner records it with "
                  "every run since this report's commit). What the study's notes know: " + "; ".join(known) + "."]
    if reruns:
        lines += [f"Machine reruns (`{RERUNS}`: committed runs' task, arm and seed trained again on another machine "
                  "kind, beside the rows they repeat): " + runs_by_machine(reruns) + "."]
    if unseen:
        lines += [f"Unseen seeds (`{UNSEEN}`: a task, arm and seed no row of `runs.jsonl` has, beside them and never in "
                  "an interval, \"Unseen seeds of every published arm\"): " + runs_by_machine(unseen) + "."]
    spans = [f"{m} − {b}" for b, m in MODEL_SEED_PAIRS["long"] if len(model_seeds_by_machine(summaries, (b, m), meta)) > 1]
    if reruns or spans:
        lines += ["The bits of a run differ by machine kind (the confirmation section). Every interval over the PPO "
                  "seeds of one SFT + RM seed is estimated on one machine kind's runs and contains no machine "
                  "component; " + (f"the intervals across SFT + RM seeds of {', '.join(spans)} span the machines their "
                                   "SFT + RM seeds were made on (\"Two pairs on several SFT + RM seeds\"); "
                                   if spans else "")
                  + "the machine component is measured in \"The machine component\"."]
    return lines + [""]


ROOT = Path(__file__).resolve().parents[2]
"""The repository whose git history the report reads (the order of decisions, the pre-registration check)."""


GENERATED_FROM = ("`docs/study/runs.jsonl`, `machine_reruns.jsonl`, `unseen_seeds.jsonl`, `positions.jsonl`, "
                  "`study_meta.json` (the runner's starts, the machines' notes, commit notes and the plans of the "
                  "comparisons made before `docs/study/plans/`), `docs/study/plans/` with their run files, "
                  "`docs/async/runs.jsonl` (compared bit for bit with the machine reruns) and the repository's git log")
"""Every input of the report and the findings."""


def report_lines(summaries: Sequence[dict], meta: Optional[dict] = None, reruns: Sequence[dict] = (),
                 unseen: Sequence[dict] = (), async_runs: Sequence[dict] = (), root: Path = ROOT) -> List[str]:
    lines = ["# PPO vs MA-PPO: the study", "",
             f"Generated by `bash scripts/reproduce/study.sh` (`python -m evaluation.study`); every number below is "
             f"recomputed from {GENERATED_FROM} by `python -m evaluation.study_report docs/study/runs.jsonl`; `bash "
             f"scripts/reproduce/study.sh --verify` retrains one exploration run, one confirmation run and one on a "
             f"further SFT + RM seed from scratch and requires their first evaluations to equal the committed ones "
             f"(bit for bit: on the machine and packages that made them; the exploration's bits did not reproduce on "
             f"the confirmation's machine, see the confirmation section).", "",
             *provenance_lines(summaries, meta, reruns, unseen),
             "Cells: seed mean, then 95% intervals: *t CI* (Student's t over seeds, for the mean), *bootstrap CI* (percentile, "
             "10k resamples; narrower, it under-covers with few seeds), *new seed* (the t prediction interval of one further "
             "seed). *rm*: the learned reward model's score; *gold*: the task's ground-truth score (`synthetic_gold_score`) of "
             "the same responses (128 samples of the held-out prompts — none of which occurs in training — one sample each at "
             "T = 0.8 with the same sampling noise at every evaluation: `--eval_seed`). Log-probs from the raw logits, as in "
             "the released code (`--logprobs_at_unit_temperature`); constant learning rate after 5 warmup iterations. "
             "Differences are paired by seed (method − baseline), with the seeds on which the method is ahead. AUC: area under "
             "the eval curve over the step range (mean level). Parity: on the seed-averaged, EMA-smoothed (0.6) curves, (first "
             "step the baseline reaches its final smoothed level) / (first step the arm does), a point estimate that depends "
             "on where training stopped (the study page's plateau point). Last-quarter change: how far each seed's curve still "
             "moved over the last quarter of training (least-squares slope × span); an interval above 0 means the arm had not "
             "converged.", "",
             "**What the intervals cover.** " + VARIATION_COVERED, "",
             *registration_lines(root, meta, summaries, {"runs.jsonl": summaries, "machine_reruns.jsonl": reruns,
                                                         "unseen_seeds.jsonl": unseen}),
             *history_lines(root, meta)]
    for task in ("short", "long"):
        groups = by_arm(summaries, task)
        if not groups:
            continue
        lines += [f"## {TASK_TITLES[task]}", ""]
        runs = [s for s in summaries if s["task"] == task]
        lengths = [s["length"][0] for s in runs if s["length"]]
        lines += [f"{len(runs)} runs; the SFT policy's mean eval response length (step 0) "
                  f"{statistics.fmean(lengths):.1f} tokens.", ""]
        core = [a for a in CORE_ARMS[task] + SWEEP_ARMS.get(task, ()) if a in groups]
        lines += table(summaries, task, "ppo", core,
                       "Core arms and sweeps (λ = 0.95 unless named; each arm paired with PPO on its seeds)")
        if task in MAPPO_LAMBDA_ARMS:  # the task with both λ sweeps and the confirmation
            tests = multiplicity(summaries)
            lines += (family_lines(summaries) + verdict_lines(groups, tests)
                      + confirmation_lines(summaries, meta) + model_seed_lines(summaries, meta) + new_seed_lines(summaries, meta)
                      + machine_component_lines(summaries, reruns, meta, async_runs)
                      + unseen_seed_lines(summaries, unseen, meta))
        lines += failure_lines(summaries, task) + convergence_lines(groups)
        ablations = [a for a in ABLATION_ARMS if a in groups]
        if ablations:
            lines += table(summaries, task, "ppo", ablations, "Further ablations (fewer seeds; paired with PPO)")
        if all(arm in groups for arm in MINI_BATCH_ARMS):
            lines += table(summaries, task, MINI_BATCH_ARMS[0], MINI_BATCH_ARMS,
                           "Several optimizer steps per rollout: MA-PPO vs PPO, both with mini-batch updates")
        missing = [arm for arm in ARMS if arm not in groups]
        if missing:
            lines += [f"Arms without runs on this task: {', '.join(missing)}.", ""]
    return lines + not_run_lines(summaries)


def write_report(out: Path, report_dir: Path) -> None:
    """Collect the finished runs under ``out`` into ``report_dir/runs.jsonl`` (beside the runs committed there
    that ``out`` does not hold: made on another machine) and the runner's starts into ``study_meta.json``, then
    render the report from them."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    runs_path = report_dir / "runs.jsonl"
    summaries = merge_runs(read_jsonl(runs_path), collect(out))
    runs_path.write_text("".join(json.dumps(s) + "\n" for s in summaries))
    merge_meta_file(out, report_dir)
    render(summaries, report_dir)


def merge_meta_file(out: Path, report_dir: Path) -> None:
    """The runner's starts under ``out`` added to ``report_dir/study_meta.json`` (its notes kept)."""
    meta, meta_path = Path(out) / "study_meta.json", Path(report_dir) / "study_meta.json"
    if meta.is_file():  # the runs' folder is named OUT, as in study.sh, not by where it was on this machine
        fresh = json.loads(meta.read_text().replace(str(Path(out).resolve()), "OUT").replace(str(out), "OUT"))
        old = json.loads(meta_path.read_text()) if meta_path.is_file() else None
        meta_path.write_text(json.dumps(merge_meta(old, fresh), indent=1, ensure_ascii=False) + "\n")


def write_reruns(out: Path, report_dir: Path) -> None:
    """File the finished runs under ``out`` that repeat committed runs on another machine into
    ``report_dir/machine_reruns.jsonl`` (``runs.jsonl`` is left as it is) and the runner's starts into
    ``study_meta.json``, then render the report."""
    report_dir = Path(report_dir)
    committed = read_jsonl(report_dir / "runs.jsonl")
    fresh = collect(out)
    reruns = merge_reruns(committed, read_jsonl(report_dir / RERUNS), fresh)
    skipped = len(fresh) - len(other_machine_runs(committed, fresh))
    if skipped:
        print(f"{skipped} runs under {out} are not reruns of committed runs on another machine: left out", flush=True)
    (report_dir / RERUNS).write_text("".join(json.dumps(s) + "\n" for s in reruns))
    merge_meta_file(out, report_dir)
    render(committed, report_dir)


def write_unseen(out: Path, report_dir: Path) -> None:
    """File the finished runs under ``out`` (each a task, arm and seed ``report_dir/runs.jsonl`` does not hold) into
    ``report_dir/unseen_seeds.jsonl`` (:func:`evaluation.study.summaries.merge_unseen`; ``runs.jsonl`` and
    ``study_meta.json``, whose starts are those of the runs the intervals come from, are left as they are: each unseen
    row carries its own commit and machine), then render the report."""
    report_dir = Path(report_dir)
    committed = read_jsonl(report_dir / "runs.jsonl")
    unseen = merge_unseen(committed, read_jsonl(report_dir / UNSEEN), collect(out))
    (report_dir / UNSEEN).write_text("".join(json.dumps(s) + "\n" for s in unseen))
    render(committed, report_dir)


def render(summaries: Sequence[dict], report_dir: Path) -> None:
    meta_path = Path(report_dir) / "study_meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    lines = report_lines(summaries, meta, read_jsonl(Path(report_dir) / RERUNS), read_jsonl(Path(report_dir) / UNSEEN),
                         read_jsonl(Path(report_dir).parent / ASYNC_RUNS))
    positions = Path(report_dir) / "positions.jsonl"
    if positions.is_file():
        lines += position_lines([json.loads(line) for line in positions.read_text().splitlines() if line.strip()],
                                seed_split(by_arm(summaries, "long"))[1], summaries)
    if plot_main(summaries, report_dir / "main.png"):
        lines += ["![core arms](main.png)", ""]
    lines += ["## The README's tables", "", *readme_table(summaries), ""]
    confirmation = confirmation_table(summaries)
    if confirmation:
        lines += [*confirmation, ""]
    (Path(report_dir) / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv=None) -> None:
    parser = ArgumentParser(description="Re-render the study report from its compact run summaries.")
    parser.add_argument("runs_jsonl", type=Path, help="docs/study/runs.jsonl (the report is written beside it)")
    args = parser.parse_args(argv)
    if not args.runs_jsonl.is_file():
        parser.exit(2, f"error: {args.runs_jsonl}: no such file\n")
    summaries = [json.loads(line) for line in args.runs_jsonl.read_text().splitlines() if line.strip()]
    render(summaries, args.runs_jsonl.parent)
