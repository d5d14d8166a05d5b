"""The numbers the paper (Chai et al., ICLR 2025) and its public review discussion report, and tables that print
this run's results beside them.

    python -m evaluation.paper_numbers table2 --size 2b --result tldr:ppo=outputs/runs/ppo/gemma-2b/tldr/ppo \\
        --result tldr:mappo=outputs/runs/ppo/gemma-2b/tldr/mappo-fixed5
    python -m evaluation.paper_numbers table2 --paper_task tldr --result synthetic:ppo=outputs/demo/ppo ...
    python -m evaluation.paper_numbers table7 --result tldr:sft=sft_scores.jsonl --result tldr:dpo=...
    python -m evaluation.paper_numbers table3 --size 7b

A result is a training output directory (its final ``eval/score`` in ``metrics.jsonl``, the test RM score logged
at the end of step 3) or a score JSONL (the mean of its "score" column, e.g. from ``evaluation.rm_score``);
repeating a TASK:METHOD averages over runs (seeds).
Figures whose values the paper states only in prose (Fig. 2 parity steps, Fig. 4 win rates) are transcribed
from the text; numbers read off plots are not included.
"""
from __future__ import annotations

import os
import statistics
import sys
from collections import OrderedDict
from typing import Dict, List, Mapping, Optional, Sequence

import yaml

from dschat.core.entrypoint import ArgumentParser
from evaluation.methods import method_key, method_label

# Table 2: test RM scores of vanilla PPO and MA-PPO (n = 5), (task, size) -> method -> score.
TABLE2_RM_SCORE = {
    ("tldr", "2b"): {"ppo": 0.84, "mappo": 1.41},
    ("hh-rlhf", "2b"): {"ppo": 1.31, "mappo": 1.55},
    ("webgpt", "2b"): {"ppo": -0.62, "mappo": -0.60},
    ("tldr", "7b"): {"ppo": 1.90, "mappo": 2.47},
    ("hh-rlhf", "7b"): {"ppo": 1.05, "mappo": 1.24},
    ("webgpt", "7b"): {"ppo": -0.61, "mappo": -0.56},
}

# Table 3: pass@k (%) on the APPS test set, size -> method -> k -> difficulty -> value.
TABLE3_PASS_AT_K = {
    "2b": {"ppo": {1: {"interview": 2.82, "introductory": 15.26, "competition": 0.92, "all": 4.92},
                   5: {"interview": 4.10, "introductory": 17.30, "competition": 1.70, "all": 6.26}},
           "mappo": {1: {"interview": 3.25, "introductory": 16.56, "competition": 0.94, "all": 5.45},
                     5: {"interview": 4.37, "introductory": 18.30, "competition": 1.60, "all": 6.60}}},
    "7b": {"ppo": {1: {"interview": 4.26, "introductory": 20.90, "competition": 1.21, "all": 6.98},
                   5: {"interview": 6.57, "introductory": 23.30, "competition": 2.30, "all": 9.06}},
           "mappo": {1: {"interview": 6.22, "introductory": 26.74, "competition": 2.00, "all": 9.48},
                     5: {"interview": 8.37, "introductory": 30.30, "competition": 3.30, "all": 11.74}}},
}

# Table 7 (Gemma-2B): test RM scores of SFT, DPO, RLOO, PPO and MA-PPO (n = 5); None = not reported.
TABLE7_RM_SCORE = {
    "tldr": {"sft": -0.64, "dpo": 0.03, "rloo": 0.81, "ppo": 0.83, "mappo": 1.40},
    "hh-rlhf": {"sft": 0.13, "dpo": 0.64, "rloo": None, "ppo": 1.31, "mappo": 1.55},
}

# Table 8: Llama-3.2-3B on TL;DR.
TABLE8_LLAMA_RM_SCORE = {"sft": 2.38, "ppo": 3.33, "mappo": 3.96}

# Table 1: agreement on TL;DR, size -> (row, column) -> rate.
TABLE1_AGREEMENT = {
    "2b": {("gpt-4", "rm"): 0.78, ("human", "rm"): 0.76, ("human", "gpt-4"): 0.58},
    "7b": {("gpt-4", "rm"): 0.78, ("human", "rm"): 0.74, ("human", "gpt-4"): 0.64},
}

# Fig. 4 win rates of MA-PPO against vanilla PPO, as stated in §4.2, (task, size) -> judge -> rate.
FIG4_WIN_RATE = {
    ("tldr", "2b"): {"gpt-4": 0.78, "human": 0.74},
    ("tldr", "7b"): {"gpt-4": 0.86, "human": 0.69},
    ("hh-rlhf", "2b"): {"gpt-4": 0.58, "human": 0.52},
    ("hh-rlhf", "7b"): {"gpt-4": 0.72, "human": 0.56},
    ("webgpt", "7b"): {"gpt-4": 0.64},
}

# Fig. 17 / review discussion: GPT-4 win / tie / loss counts over 50 pairs (Gemma-2B); Llama-3.2-3B (§C.4) rates.
JUDGE_COUNTS = {
    ("tldr", "rloo", "ppo"): (25, 1, 24),
    ("tldr", "rloo", "mappo"): (12, 2, 36),
    ("tldr", "dpo", "ppo"): (17, 5, 28),
    ("tldr", "dpo", "mappo"): (4, 6, 40),
    ("hh-rlhf", "dpo", "ppo"): (26, 2, 22),
    ("hh-rlhf", "dpo", "mappo"): (21, 4, 25),
}
LLAMA_MAPPO_VS_PPO_RATES = (0.61, 0.04, 0.34)

# Parity steps (§4.2 for TL;DR, §C.1 for HH-RLHF): step at which MA-PPO reaches vanilla PPO's score, and PPO's.
PARITY_STEPS = {
    ("tldr", "2b"): {"mappo": 1700, "ppo": 3700},
    ("hh-rlhf", "2b"): {"mappo": 3100, "ppo": 5100},
    ("hh-rlhf", "7b"): {"mappo": 2600, "ppo": 5400},
}
PARITY_SPEEDUP_RANGE = (1.7, 2.0)

# Review discussion: RM score and length-debiased RM score, (task, size) -> method -> (score, debiased).
LENGTH_DEBIASED_RM_SCORE = {
    ("tldr", "2b"): {"ppo": (0.86, 0.39), "mappo": (1.39, 0.53)},
    ("tldr", "7b"): {"ppo": (1.91, 0.40), "mappo": (2.50, 0.58)},
    ("hh-rlhf", "2b"): {"ppo": (1.33, 0.70), "mappo": (1.53, 0.90)},
    ("hh-rlhf", "7b"): {"ppo": (1.07, 0.52), "mappo": (1.24, 0.60)},
}

# Table 9 (and the review discussion): termination rules, Gemma-2B, task -> rule -> (RM score, GPT-4 win rate
# against vanilla PPO).
TERMINATION_RESULTS = {
    "tldr": {"fixed5": (1.40, 0.78), "parsing": (1.37, 0.78), "ppl": (1.27, 0.72)},
    "hh-rlhf": {"fixed5": (1.55, 0.58), "parsing": (1.64, 0.62)},
}
# Table 10: pass@1 (%) on APPS (CodeGemma-2B) per termination rule.
APPS_TERMINATION_PASS_AT_1 = {
    "fixed10": {"interview": 3.25, "introductory": 16.56, "competition": 0.94, "all": 5.45},
    "parsing": {"interview": 3.17, "introductory": 17.05, "competition": 1.24, "all": 5.56},
    "ppl": {"interview": 3.04, "introductory": 16.36, "competition": 0.80, "all": 5.26},
}

TASK_LABELS = {"tldr": "TL;DR", "hh-rlhf": "HH-RLHF", "webgpt": "WebGPT"}
DIFFICULTY_LABELS = (("interview", "Inter."), ("introductory", "Intro."), ("competition", "Comp."), ("all", "All"))


def relative_gain(value: float, reference: float) -> float:
    """The paper's subscript gains in Tables 2 / 3: ``(value - reference) / |reference|``."""
    return (value - reference) / abs(reference)


def final_test_score(path: str, allow_unfinished: bool = False) -> float:
    """A run's test RM score: the last ``eval/score`` of a training directory's latest run, or the mean "score"
    of a score JSONL file. A run that has not finished (no final model yet: still running, or stopped) is refused
    unless ``allow_unfinished``, and then announced on stderr: its last score is not the run's result."""
    if os.path.isdir(path):
        from dschat.training.run_record import run_finished
        from evaluation.curves import EVAL_SCORE, latest_run, metric_series
        from evaluation.training_summary import read_metrics

        series = metric_series(latest_run(read_metrics(path)), EVAL_SCORE)
        if not len(series):
            raise ValueError(f"{path}: no '{EVAL_SCORE}' in metrics.jsonl")
        if not run_finished(path):
            state = f"{path}: unfinished run (no final model yet; its last '{EVAL_SCORE}' is at step {series.steps[-1]:.0f})"
            if not allow_unfinished:
                raise ValueError(f"{state}; wait for it to finish, or pass --allow_unfinished to report that score")
            print(f"warning: {state}: reported as its latest score", file=sys.stderr)
        return series.values[-1]
    from evaluation.plots import read_scores

    return statistics.fmean(read_scores(path))


def mean_test_score(paths: Sequence[str], allow_unfinished: bool = False) -> float:
    """The mean of :func:`final_test_score` over several runs of one method (seeds)."""
    return statistics.fmean(final_test_score(path, allow_unfinished) for path in paths)


def parse_results(specs: Sequence[str]) -> "OrderedDict[str, Dict[str, List[str]]]":
    """``TASK:METHOD=PATH`` arguments → task → method → paths (first-seen order; a repeated TASK:METHOD adds a
    run whose score is averaged in); task names are case-insensitive, method names matched through
    :mod:`evaluation.methods` (``MA-PPO`` is ``mappo``)."""
    results: "OrderedDict[str, Dict[str, List[str]]]" = OrderedDict()
    for spec in specs:
        key, sep, path = spec.partition("=")
        task, colon, method = key.partition(":")
        if not sep or not colon or not task or not method or not path:
            raise ValueError(f"--result {spec!r}: expected TASK:METHOD=PATH (e.g. tldr:mappo=outputs/mappo)")
        results.setdefault(task.lower(), {}).setdefault(method_key(method), []).append(path)
    return results


def _cell(value: Optional[float], width: int = 9) -> str:
    return f"{value:>{width}.3f}" if value is not None else f"{'-':>{width}}"


def _gain_cell(value: Optional[float], reference: Optional[float], width: int = 8) -> str:
    if value is None or reference is None or reference == 0:
        return " " * width
    return f"{100 * relative_gain(value, reference):>+{width - 1}.0f}%"


PAPER_NGRAM = 5
"""The n of the paper's MA-PPO in Tables 2 and 7 (fixed n-gram termination)."""


def termination_of(path: str) -> str:
    """The termination rule a result ran with, from its ``run_config.yaml`` (``n=5`` for fixed n-grams, ``n=inf``
    for one macro per response, else the rule's name); ``n=?`` for a score JSONL or a run without a record."""
    record = os.path.join(path, "run_config.yaml")
    if not os.path.isfile(record):
        return "n=?"
    with open(record) as handle:
        config = (yaml.safe_load(handle) or {}).get("config") or {}
    if "termination" not in config:
        return "n=?"
    if config["termination"] != "fixed":
        return config["termination"]
    return f"n={config.get('ngram') or 'inf'}"


def run_labels(paths: Mapping[str, Sequence[str]]) -> Dict[str, str]:
    """``{method: its row label}``: MA-PPO named with the termination its runs used (not the paper's n = 5)."""
    labels = {method: method_label(method) for method in paths}
    if "mappo" in paths:
        labels["mappo"] = f"MA-PPO ({', '.join(sorted({termination_of(path) for path in paths['mappo']}))})"
    return labels


def paper_source(task: str, reference_task: str, numbers: Mapping, model: str, flag: str) -> str:
    """The title's note on what the paper column holds: the paper's task and model, or that it has none."""
    if not numbers:
        return f"the paper reports no {reference_task} numbers; {flag} TASK compares with one of its tasks"
    return (f"paper: {TASK_LABELS.get(reference_task, reference_task)}, {model}, MA-PPO n = {PAPER_NGRAM}"
            + ("" if reference_task == task else f"; this run's task: {task}"))


def score_table(title: str, this_run: Mapping[str, float], paper: Mapping[str, Optional[float]],
                methods: Sequence[str], reference_method: str = "ppo", runs: Optional[Mapping[str, int]] = None,
                labels: Optional[Mapping[str, str]] = None) -> str:
    """Rows = methods (named by ``labels``, default :func:`method_label`); columns = this run's score (the mean
    over its runs, their count in ``runs``) and gain over ``reference_method``, then the paper's."""
    runs, labels = runs or {}, labels or {}
    lines = [title, f"{'method':<16}{'this run':>9}{'gain':>8}{'runs':>6}   {'paper':>9}{'gain':>8}"]
    for method in methods:
        ours, theirs = this_run.get(method), paper.get(method)
        ours_gain = _gain_cell(ours, this_run.get(reference_method)) if method != reference_method else " " * 8
        paper_gain = _gain_cell(theirs, paper.get(reference_method)) if method != reference_method else " " * 8
        count = f"{runs[method]:>6}" if method in runs else f"{'-':>6}"
        label = labels.get(method, method_label(method))
        lines.append(f"{label:<16}{_cell(ours)}{ours_gain}{count}   {_cell(theirs)}{paper_gain}")
    return "\n".join(lines)


def table2(results: Mapping[str, Mapping[str, Sequence[str]]], size: str, paper_task: Optional[str] = None,
           allow_unfinished: bool = False) -> str:
    """Table 2 blocks, one per task: this run's test RM score of PPO and MA-PPO beside the paper's."""
    blocks = []
    for task, paths in results.items():
        reference_task = paper_task or task
        paper = TABLE2_RM_SCORE.get((reference_task, size), {})
        scores = {method: mean_test_score(runs, allow_unfinished) for method, runs in paths.items()}
        methods = ["ppo", "mappo"] + [m for m in scores if m not in ("ppo", "mappo")]
        source = paper_source(task, reference_task, paper, f"Gemma-{size.upper()}", "--paper_task")
        blocks.append(score_table(f"Table 2 - test RM score on {task} ({source})", scores, paper, methods,
                                  runs={method: len(runs) for method, runs in paths.items()}, labels=run_labels(paths)))
    return "\n\n".join(blocks)


def table7(results: Mapping[str, Mapping[str, Sequence[str]]], paper_task: Optional[str] = None,
           allow_unfinished: bool = False) -> str:
    """Table 7 blocks: SFT, DPO, RLOO, PPO and MA-PPO test RM scores beside the paper's (Gemma-2B)."""
    blocks = []
    for task, paths in results.items():
        reference_task = paper_task or task
        paper = TABLE7_RM_SCORE.get(reference_task, {})
        scores = {method: mean_test_score(runs, allow_unfinished) for method, runs in paths.items()}
        methods = [m for m in ("sft", "dpo", "rloo", "ppo", "mappo") if m in scores or paper.get(m) is not None]
        methods += [m for m in scores if m not in methods]
        source = paper_source(task, reference_task, paper, "Gemma-2B", "--paper_task")
        blocks.append(score_table(f"Table 7 - test RM score on {task} ({source})", scores, paper, methods,
                                  runs={method: len(runs) for method, runs in paths.items()}, labels=run_labels(paths)))
    return "\n\n".join(blocks)


def table3_paper(size: str) -> str:
    """The paper's Table 3 column pair for one CodeGemma size (pass@1 and pass@5 per APPS difficulty)."""
    numbers = TABLE3_PASS_AT_K[size]
    lines = [f"Table 3 (paper, CodeGemma-{size.upper()}) - pass@k (%) on APPS",
             f"{'':<8}{'':<8}{'PPO':>8}{'MA-PPO':>9}{'gain':>7}"]
    for k in (1, 5):
        for difficulty, label in DIFFICULTY_LABELS:
            ppo, mappo = numbers["ppo"][k][difficulty], numbers["mappo"][k][difficulty]
            lines.append(f"{f'pass@{k}':<8}{label:<8}{ppo:>8.2f}{mappo:>9.2f}{_gain_cell(mappo, ppo, 7)}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    t2 = commands.add_parser("table2", help="test RM scores of PPO and MA-PPO beside Table 2")
    t2.add_argument("--result", action="append", required=True, metavar="TASK:METHOD=PATH",
                    help="METHOD is ppo or mappo (others are listed too); PATH a run directory or score JSONL")
    t2.add_argument("--size", choices=["2b", "7b", "27b"], default="2b",
                    help="paper column (Gemma size; the paper has no Table 2 numbers for 27B)")
    t2.add_argument("--paper_task", choices=list(TASK_LABELS), default=None,
                    help="paper task to compare with (default: the result's task; use for synthetic runs)")
    t7 = commands.add_parser("table7", help="SFT/DPO/RLOO/PPO/MA-PPO test RM scores beside Table 7")
    t7.add_argument("--result", action="append", required=True, metavar="TASK:METHOD=PATH")
    t7.add_argument("--paper_task", choices=["tldr", "hh-rlhf"], default=None)
    for command in (t2, t7):
        command.add_argument("--allow_unfinished", action="store_true",
                             help="report a run that has not finished at its latest score (default: refuse it)")
    t3 = commands.add_parser("table3", help="print the paper's Table 3 for one size")
    t3.add_argument("--size", choices=["2b", "7b"], default="2b")
    args = parser.parse_args(argv)
    try:
        if args.command == "table2":
            print(table2(parse_results(args.result), args.size, args.paper_task, args.allow_unfinished))
        elif args.command == "table7":
            print(table7(parse_results(args.result), args.paper_task, args.allow_unfinished))
        else:
            print(table3_paper(args.size))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
