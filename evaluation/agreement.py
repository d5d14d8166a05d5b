"""Agreement between reward-model preferences, LLM-judge verdicts and human labels (paper Table 1).

    python -m evaluation.agreement --rm_a mappo_scores.jsonl --rm_b ppo_scores.jsonl \\
        --judge verdicts.jsonl --human human.csv --size 2b

Every source yields one preference per (prompt, occurrence) pair of responses A and B: "a", "b" or "tie".

- RM (``--rm_a`` / ``--rm_b``): score JSONL files with "prompt" and "score" (``evaluation.rm_score``); the
  response with the higher RM score is preferred (§4.2: "we determine the reward model's win rate by selecting
  the summary with the higher RM score").
- judge (``--judge``): the ``--output`` JSONL of ``evaluation.judge`` ("prompt", "verdict"); unparseable
  verdicts are left out. Its row is labelled with the model that answered ("judge_model" of the verdicts),
  unless ``--judge_name`` says otherwise.
- human (``--human``): CSV or JSONL with "prompt" and "preferred" (a / b / tie; A / B / E accepted).

The agreement of two sources is the fraction of the pairs both judged on which they give the same preference.
"""
from __future__ import annotations

import csv
import os
import sys
from collections import defaultdict
from typing import Dict, Mapping, Optional, Sequence, Tuple

from evaluation.judge_scoring import PREFER_A, PREFER_B, TIE, UNPARSEABLE, judge_label
from dschat.core.entrypoint import ArgumentParser
from evaluation.jsonl import read_jsonl

PairKey = Tuple[str, int]
HUMAN_LABELS = {"a": PREFER_A, "b": PREFER_B, "tie": TIE, "e": TIE, "equal": TIE, "draw": TIE}


def preference_from_scores(score_a: float, score_b: float) -> str:
    """The RM's preference between two responses: the higher score wins; equal scores are a tie."""
    if score_a > score_b:
        return PREFER_A
    return PREFER_B if score_b > score_a else TIE


def key_by_occurrence(labelled: Sequence[Tuple[str, str]]) -> Dict[PairKey, str]:
    """(prompt, label) rows → {(prompt, k): label}, k counting earlier rows with the same prompt, so that
    repeated prompts pair up in file order across sources."""
    seen: Dict[str, int] = defaultdict(int)
    keyed = {}
    for prompt, label in labelled:
        keyed[(prompt, seen[prompt])] = label
        seen[prompt] += 1
    return keyed


def agreement(x: Mapping[PairKey, str], y: Mapping[PairKey, str]) -> Tuple[Optional[float], int]:
    """(fraction of shared, judged pairs with equal preferences, number of such pairs); None when none."""
    shared = [k for k in x if k in y and UNPARSEABLE not in (x[k], y[k])]
    if not shared:
        return None, 0
    return sum(x[k] == y[k] for k in shared) / len(shared), len(shared)


def agreement_matrix(sources: Mapping[str, Mapping[PairKey, str]]) -> Dict[Tuple[str, str], Tuple[Optional[float], int]]:
    """Table 1's lower triangle: (row, column) → agreement for every pair of sources, row after column."""
    names = list(sources)
    return {(row, col): agreement(sources[row], sources[col])
            for i, row in enumerate(names) for col in names[:i]}


def format_agreement(matrix: Mapping[Tuple[str, str], Tuple[Optional[float], int]], names: Sequence[str],
                     paper: Optional[Mapping[Tuple[str, str], float]] = None,
                     labels: Optional[Mapping[str, str]] = None) -> str:
    """Table 1 layout: a lower-triangular matrix with 100% on the diagonal; "(paper X%)" where it reports one.
    ``names`` are the sources (matrix keys), shown as ``labels[name]`` when given."""
    width = 24
    shown = {name: (labels or {}).get(name, name) for name in names}
    row_width = max(8, *(len(label) + 1 for label in shown.values()))
    lines = [" " * row_width + "".join(f"{shown[n]:>{width}}" for n in names)]
    for i, row in enumerate(names):
        cells = []
        for j, col in enumerate(names):
            if j > i:
                cells.append(f"{'-':>{width}}")
            elif j == i:
                cells.append(f"{'100%':>{width}}")
            else:
                rate, count = matrix[(row, col)]
                text = "n/a" if rate is None else f"{100 * rate:.0f}% (n={count})"
                reference = (paper or {}).get((row, col))
                text += f" [paper {100 * reference:.0f}%]" if reference is not None else ""
                cells.append(f"{text:>{width}}")
        lines.append(f"{shown[row]:<{row_width}}" + "".join(cells))
    return "\n".join(lines)


def _field(path: str, number: int, row, key: str):
    if not isinstance(row, dict) or key not in row:
        raise ValueError(f"{path} row {number}: needs {key!r}")
    return row[key]


def read_rm_preferences(path_a: str, path_b: str) -> Dict[PairKey, str]:
    """RM preferences from two score files aligned by prompt (k-th occurrence with k-th occurrence)."""
    scored = []
    for path in (path_a, path_b):
        labelled = [(_field(path, n, row, "prompt"), float(_field(path, n, row, "score"))) for n, row in read_jsonl(path)]
        scored.append(key_by_occurrence(labelled))
    scores_a, scores_b = scored
    missing = [k for k in scores_a if k not in scores_b]
    if missing:
        raise ValueError(f"{path_b}: no score for prompt #{missing[0][1] + 1} {missing[0][0][:60]!r} of {path_a}")
    return {k: preference_from_scores(scores_a[k], scores_b[k]) for k in scores_a}


def read_judge_preferences(path: str) -> Tuple[Dict[PairKey, str], str]:
    """(preferences, the judge's name): the model(s) named by the rows' "judge_model" ('+'-joined when several
    answered), or "judge" when the file does not record one."""
    labelled, models = [], set()
    for number, row in read_jsonl(path):
        verdict = _field(path, number, row, "verdict")
        if verdict not in (PREFER_A, PREFER_B, TIE, UNPARSEABLE):
            raise ValueError(f"{path} row {number}: verdict {verdict!r} is not a, b, tie or unparseable")
        labelled.append((_field(path, number, row, "prompt"), verdict))
        if row.get("judge_model"):
            models.update(str(row["judge_model"]).split("+"))
    return key_by_occurrence(labelled), judge_label("+".join(sorted(models))) or "judge"


def read_human_preferences(path: str) -> Dict[PairKey, str]:
    """Human labels from a CSV (header with "prompt" and "preferred") or a JSONL file."""
    if path.endswith(".csv"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file")
        with open(path, newline="") as handle:
            rows = list(enumerate(csv.DictReader(handle), 2))
    else:
        rows = read_jsonl(path)
    labelled = []
    for number, row in rows:
        label = str(_field(path, number, row, "preferred")).strip().lower()
        if label not in HUMAN_LABELS:
            raise ValueError(f"{path} row {number}: preferred {label!r} is not a, b or tie")
        labelled.append((_field(path, number, row, "prompt"), HUMAN_LABELS[label]))
    return key_by_occurrence(labelled)


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--rm_a", help="RM scores of response A (JSONL: prompt, score)")
    parser.add_argument("--rm_b", help="RM scores of response B")
    parser.add_argument("--judge", help="evaluation.judge --output verdicts (JSONL)")
    parser.add_argument("--judge_name", default=None,
                        help="row label of the judge (default: the model that answered, as the verdicts record it)")
    parser.add_argument("--human", help="human labels (CSV or JSONL: prompt, preferred)")
    parser.add_argument("--size", choices=["2b", "7b"], default=None, help="show the paper's Table 1 for this size")
    args = parser.parse_args(argv)
    try:
        sources: Dict[str, Mapping[PairKey, str]] = {}
        labels: Dict[str, str] = {}
        if bool(args.rm_a) != bool(args.rm_b):
            raise ValueError("--rm_a and --rm_b go together")
        if args.rm_a:
            sources["rm"] = read_rm_preferences(args.rm_a, args.rm_b)
        if args.judge:
            sources["judge"], answered = read_judge_preferences(args.judge)
            labels["judge"] = args.judge_name or answered
        if args.human:
            sources["human"] = read_human_preferences(args.human)
        if len(sources) < 2:
            raise ValueError("need at least two of --rm_a/--rm_b, --judge, --human")
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    from evaluation.paper_numbers import TABLE1_AGREEMENT

    role = {"gpt-4": "judge"}  # the paper's judge
    paper = None
    if args.size:
        paper = {(role.get(row, row), role.get(col, col)): value
                 for (row, col), value in TABLE1_AGREEMENT[args.size].items()}
    print("Table 1 - agreement between preference sources" + (f" (paper: TL;DR, Gemma-{args.size.upper()}, judge "
                                                             "GPT-4)" if paper else ""))
    print(format_agreement(agreement_matrix(sources), list(sources), paper, labels))


if __name__ == "__main__":
    main()
