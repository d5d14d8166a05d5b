"""The record of one pipeline run (``scripts/demo.sh``, ``scripts/reproduce/smollm2_cpu.sh``) and the README
table it renders, so the figures the README quotes for a pipeline cannot drift from the run that produced them.

A record (JSON) holds, per stage output directory: the first and last held-out evaluation (``eval/*`` of its
``metrics.jsonl``), the commit it was trained at and whether it finished (``run_config.yaml``), and its wall and
CPU seconds (the script's ``times.txt``); plus the reward model's held-out ranking under plain transformers / TRL
conventions when the script ran ``evaluation.rm_interop`` (its last output line, in ``interop.txt``). The scripts
write ``$OUT/record.json`` at their end; the README's table for a pipeline is :func:`readme_table` of the record
committed under ``docs/`` (``docs/demo/record.json``, ``docs/smollm2/record.json``), which a test checks.

A record names the machine its stages ran on (``run_config.yaml``'s ``machine``,
:func:`dschat.core.machine.machine_record`): deterministic runs give identical bits on one CPU kind and other bits
on another (BLAS kernels chosen by CPU model and ISA level). :func:`compare` puts a run's final figures beside a
committed record's and says which a difference is: another machine's bits, or a real change on the same machine.

    python -m evaluation.pipeline_record collect OUT sft rm ppo mappo [--out FILE]   # prints the record's table
    python -m evaluation.pipeline_record table FILE                                  # the table of a saved record
    python -m evaluation.pipeline_record compare NEW REFERENCE                       # figures side by side
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Dict, List, Optional

import yaml

from evaluation.study.stats import mean_estimate, paired_difference
from evaluation.training_summary import eval_endpoints, read_metrics
from dschat.core.entrypoint import ArgumentParser
from dschat.core.machine import machine_line

FIGURES = {"perplexity": "response perplexity", "accuracy": "pair accuracy", "score": "RM score",
           "gold": "gold score"}
"""The held-out figures a stage's row quotes (``eval/<key>``), in this order, with their README names."""
SEEDED = re.compile(r"(.+)-s(\d+)")
"""A stage named ``<arm>-s<seed>``: one seed of an arm run with several (``smollm2_cpu.sh``'s ``ppo-s1``)."""
MACHINE_KIND = ("cpu", "isa", "gpu")
"""What makes two machines give other bits for the same deterministic run (the kernels chosen)."""
TIMES = "times.txt"
INTEROP = "interop.txt"


class RecordError(ValueError):
    """A pipeline output that cannot be recorded (one line for the command line)."""


def stage_evaluations(run_dir: str) -> Dict[str, dict]:
    """``{"first": {...}, "last": {...}}``: the ``eval/*`` values (and ``step``) at the first and last evaluation."""
    try:
        first, last = eval_endpoints(read_metrics(run_dir))
    except FileNotFoundError as err:
        raise RecordError(str(err)) from None
    if first is None:
        raise RecordError(f"{run_dir}/metrics.jsonl: no evaluation logged")
    return {"first": first, "last": last}


def run_config(run_dir: str) -> dict:
    """The stage's ``run_config.yaml``."""
    path = os.path.join(run_dir, "run_config.yaml")
    if not os.path.isfile(path):
        raise RecordError(f"{path}: missing (the stage did not start from this project's entry point)")
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def stage_provenance(run_dir: str) -> dict:
    """``{"commit", "dirty", "finished"}`` from the stage's ``run_config.yaml``."""
    config = run_config(run_dir)
    git = config.get("git") or {}
    return {"commit": git.get("commit"), "dirty": git.get("dirty"), "finished": config.get("finished") is not None}


def pipeline_machine(out_dir: str, stages: List[str]) -> Optional[dict]:
    """The machine the stages ran on (their ``run_config.yaml``'s ``machine``; None for records made before it was
    written); a RecordError when two stages ran on different kinds of machine."""
    machines = {stage: run_config(os.path.join(out_dir, stage)).get("machine") for stage in stages}
    first, machine = next(iter(machines.items()))
    for stage, other in machines.items():
        if machine_kind(other) != machine_kind(machine):
            raise RecordError(f"{out_dir}: {stage} ran on another machine than {first} ({machine_kind(other)} vs "
                              f"{machine_kind(machine)}); one record is one machine's")
    return machine


def machine_kind(machine: Optional[dict]) -> Optional[tuple]:
    return None if machine is None else tuple(machine.get(key) for key in MACHINE_KIND)


def read_times(out_dir: str) -> Dict[str, dict]:
    """``{stage: {"wall_s", "cpu_s"}}`` from the lines ``NAME wall_s=W cpu_s=C`` of ``times.txt`` (none: {})."""
    path = os.path.join(out_dir, TIMES)
    if not os.path.isfile(path):
        return {}
    times = {}
    with open(path) as handle:
        for line in handle:
            match = re.fullmatch(r"(\S+) wall_s=(\d+) cpu_s=(\d+)", line.strip())
            if match:
                times[match[1]] = {"wall_s": int(match[2]), "cpu_s": int(match[3])}
    return times


def read_interop(out_dir: str) -> Optional[dict]:
    """The report of ``evaluation.rm_interop`` (its JSON line in ``interop.txt``), or None."""
    path = os.path.join(out_dir, INTEROP)
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    pairs = re.match(r"(\d+) held-out pairs", lines[0]) if lines else None
    reports = [line for line in lines if line.startswith("{")]
    try:
        report = json.loads(reports[-1])
    except (IndexError, json.JSONDecodeError):
        raise RecordError(f"{path}: no rm_interop JSON report line (did the run end early?)") from None
    return {"pairs": int(pairs[1]) if pairs else None, "conventions": report}


def collect(out_dir: str, stages: List[str]) -> dict:
    """The record of the pipeline whose stages wrote ``out_dir/<stage>`` (see the module docstring)."""
    times = read_times(out_dir)
    record = {"stages": {}}
    for stage in stages:
        run_dir = os.path.join(out_dir, stage)
        if not os.path.isdir(run_dir):
            raise RecordError(f"{run_dir}: no such stage output directory")
        record["stages"][stage] = {**stage_provenance(run_dir), **stage_evaluations(run_dir), **times.get(stage, {})}
    for name, spent in times.items():
        if name not in record["stages"]:
            record.setdefault("other_times", {})[name] = spent
    interop = read_interop(out_dir)
    if interop is not None:
        record["interop"] = interop
    machine = pipeline_machine(out_dir, stages)
    if machine is not None:
        record["machine"] = machine
    return record


def _figures(stage: dict) -> str:
    first, last = stage["first"], stage["last"]
    cells = [f"{name} {first[f'eval/{key}']:.3g} → {last[f'eval/{key}']:.3g}"
             for key, name in FIGURES.items() if f"eval/{key}" in last and f"eval/{key}" in first]
    return "; ".join(cells) + f" (step {first['step']} → {last['step']})"


def seed_arms(record: dict) -> Dict[str, Dict[int, dict]]:
    """``{arm: {seed: stage}}`` for the stages named ``<arm>-s<seed>`` (several seeds of one method), in order."""
    arms: Dict[str, Dict[int, dict]] = {}
    for name, stage in record["stages"].items():
        match = SEEDED.fullmatch(name)
        if match:
            arms.setdefault(match[1], {})[int(match[2])] = stage
    return arms


def seed_lines(record: dict) -> List[str]:
    """Per arm run with several seeds, the final held-out figures' seed mean with its Student's t 95% interval,
    then each later arm minus the first, paired by seed (mean [t interval], seeds where the arm is ahead)."""
    arms = {arm: runs for arm, runs in seed_arms(record).items() if len(runs) > 1}
    if not arms:
        return []
    keys = [key for key in FIGURES if all(f"eval/{key}" in run["last"] for runs in arms.values()
                                          for run in runs.values())]
    lines = ["| arm (seeds) | " + " | ".join(f"final {FIGURES[key]} [t CI]" for key in keys) + " |",
             "|---" * (1 + len(keys)) + "|"]
    for arm, runs in arms.items():
        cells = [mean_estimate([run["last"][f"eval/{key}"] for run in runs.values()]).text() for key in keys]
        lines.append(f"| {arm} ({len(runs)}) | " + " | ".join(cells) + " |")
    (base_name, base), *others = arms.items()
    for arm, runs in others:
        seeds = sorted(set(runs) & set(base))
        cells = []
        for key in keys:
            paired = paired_difference([base[seed]["last"][f"eval/{key}"] for seed in seeds],
                                       [runs[seed]["last"][f"eval/{key}"] for seed in seeds])
            cells.append(f"{paired.diff.text()}, ahead {paired.ahead}/{len(seeds)}")
        lines.append(f"| {arm} − {base_name}, paired by seed ({len(seeds)}) | " + " | ".join(cells) + " |")
    return lines


def readme_table(record: dict) -> List[str]:
    """The README's table of a pipeline record: one row per stage (held-out figures first → last, seconds,
    commit), the arms run with several seeds (:func:`seed_lines`), and the reward model's ranking per scoring
    convention when the record has one."""
    lines = [f"{machine_line(record['machine'])}", ""] if record.get("machine") else []
    lines += ["| stage | held-out figures, first → last evaluation | wall s | CPU s | commit |", "|---|---|---|---|---|"]
    for name, stage in record["stages"].items():
        commit = (stage["commit"] or "unknown")[:12] + ("+dirty" if stage["dirty"] else "")
        lines.append(f"| {name} | {_figures(stage)} | {stage.get('wall_s', '—')} | {stage.get('cpu_s', '—')} "
                     f"| `{commit}` |")
    seeds = seed_lines(record)
    if seeds:
        lines += ["", *seeds]
    interop = record.get("interop")
    if interop:
        lines += ["", f"| RM scoring convention ({interop['pairs']} held-out pairs) | accuracy | agreement with "
                  "the project | max \\|Δscore\\| |", "|---|---|---|---|"]
        for convention, row in interop["conventions"].items():
            lines.append(f"| `{convention}` | {row['accuracy']:.3f} | {row['agreement']:.3f} "
                         f"| {row['max_abs_diff']:.2g} |")
    return lines


def final_figures(record: dict) -> Dict[str, float]:
    """``{"<stage> <figure>": value}`` of each stage's last evaluation (the figures :func:`readme_table` quotes)."""
    return {f"{name} {FIGURES[key]}": stage["last"][f"eval/{key}"] for name, stage in record["stages"].items()
            for key in FIGURES if f"eval/{key}" in stage["last"]}


def compare(new: dict, reference: dict) -> List[str]:
    """Each final figure of ``new`` beside ``reference``'s, then one verdict line: identical; different on
    another kind of machine (CPU model, ISA level or GPU differ: its own bits, not a broken install); or different
    on the same kind (a real change: code, package versions or flags)."""
    ours, theirs = final_figures(new), final_figures(reference)
    shared = [name for name in ours if name in theirs]
    lines = [f"{'figure':<28} {'this run':>10} {'record':>10}"]
    lines += [f"{name:<28} {ours[name]:>10.4g} {theirs[name]:>10.4g}" + ("" if ours[name] == theirs[name] else "  *")
              for name in shared]
    machines = [f"this run: {machine_line(new['machine']) if new.get('machine') else 'machine unknown'}",
                f"record:   {machine_line(reference['machine']) if reference.get('machine') else 'machine unknown'}"]
    differ = [name for name in shared if ours[name] != theirs[name]]
    if not differ:
        return lines + machines + [f"same figures as the record ({len(shared)} compared, bit for bit)"]
    kinds = machine_kind(new.get("machine")), machine_kind(reference.get("machine"))
    if None in kinds:
        verdict = "a machine is not recorded: cannot tell another machine's bits from a real change"
    elif kinds[0] != kinds[1]:
        verdict = ("another kind of machine (CPU model, ISA level or GPU differ): its BLAS kernels give other bits; "
                   "not a broken install")
    else:
        verdict = ("the same kind of machine gives other figures: a real change (code, package versions or flags) "
                   "— compare the versions above and the run_config.yaml files")
    return lines + machines + [f"{len(differ)} of {len(shared)} figures differ (*): {verdict}"]


def load_record(path: str) -> dict:
    if not os.path.isfile(path):
        raise RecordError(f"{path}: no such file")
    with open(path) as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as err:
            raise RecordError(f"{path}: not a JSON record ({err})") from None


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    gather = commands.add_parser("collect", help="record a pipeline's output directory and print its table")
    gather.add_argument("out_dir", help="the pipeline's output directory ($OUT)")
    gather.add_argument("stages", nargs="+", help="its stages' subdirectories, in pipeline order")
    gather.add_argument("--out", help="where to write the record (default: OUT/record.json)")
    show = commands.add_parser("table", help="print the README table of a saved record")
    show.add_argument("record", help="a record.json")
    against = commands.add_parser("compare", help="a run's final figures beside a committed record's, and why "
                                  "they differ (another machine, or a real change)")
    against.add_argument("new", help="this run's record.json")
    against.add_argument("reference", help="the committed record.json (e.g. docs/demo/record.json)")
    args = parser.parse_args(argv)
    try:
        if args.command == "compare":
            print("\n".join(compare(load_record(args.new), load_record(args.reference))))
            return
        if args.command == "collect":
            record = collect(args.out_dir, args.stages)
            with open(args.out or os.path.join(args.out_dir, "record.json"), "w") as handle:
                json.dump(record, handle, indent=1)
                handle.write("\n")
        else:
            record = load_record(args.record)
    except RecordError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(readme_table(record)))


if __name__ == "__main__":
    main()
