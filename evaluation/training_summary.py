"""Print the first and last evaluation metrics of training runs from their ``metrics.jsonl`` logs.

    python -m evaluation.training_summary outputs/demo/sft outputs/demo/rm outputs/demo/ppo outputs/demo/mappo
"""
from __future__ import annotations

import json
import os
import sys
from dschat.core.entrypoint import ArgumentParser


def read_metrics(run_dir: str) -> list:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no metrics log (is {run_dir} a training output directory?)")
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def eval_endpoints(records: list) -> tuple:
    """(first, last) evaluation records: the ``eval/*`` values logged at the lowest and highest step."""
    evals = [{k: v for k, v in r.items() if k.startswith("eval/") or k == "step"} for r in records]
    evals = [e for e in evals if len(e) > 1]
    if not evals:
        return None, None
    return evals[0], evals[-1]


def summary_lines(run_dirs: list) -> list:
    lines = []
    for run_dir in run_dirs:
        first, last = eval_endpoints(read_metrics(run_dir))
        if first is None:
            lines.append(f"{run_dir}: no evaluation logged")
            continue
        keys = [k for k in last if k != "step"]
        cells = ", ".join(f"{k[5:]} {first.get(k, float('nan')):.4g} -> {last[k]:.4g}" for k in keys)
        lines.append(f"{run_dir} (step {first['step']} -> {last['step']}): {cells}")
    return lines


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("run_dirs", nargs="+", help="training output directories")
    args = parser.parse_args(argv)
    try:
        print("\n".join(summary_lines(args.run_dirs)))
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
