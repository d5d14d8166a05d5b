"""Length-debiased RM score (the authors' answer to reviewer QYzk in the review discussion, after
Length-Controlled AlpacaEval): regress the RM score on response length over the responses of every method
pooled, and report each method's mean residual, i.e. the part of its score that length does not explain.

    python -m evaluation.length_debias --scores ppo=ppo_scores.jsonl mappo=mappo_scores.jsonl \\
        --reference chosen_scores.jsonl --paper tldr:2b

The authors fit XGBoost on 7,500 responses (PPO, MA-PPO and dataset references); with the small samples of a
reproduction we fit ordinary least squares ``score ≈ intercept + slope * length``, which keeps the result a
pure, checkable function. ``--reference`` files join the regression without being reported, as the authors'
dataset references did. Length is a row's "response_tokens" / "length" field if present, else the token
count under ``--tokenizer``, else the number of whitespace-separated words of "response".
Rows of ``evaluation.rm_score`` carry "response_tokens", the policy's own token count.
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple
from dschat.core.entrypoint import ArgumentParser
from evaluation.jsonl import read_jsonl

LENGTH_KEYS = ("response_tokens", "length", "response_length")


def fit_least_squares(lengths: Sequence[float], scores: Sequence[float]) -> Tuple[float, float]:
    """(intercept, slope) of the ordinary least-squares line through (length, score); slope 0 when every
    length is the same."""
    if len(lengths) != len(scores) or not lengths:
        raise ValueError(f"need as many lengths as scores (got {len(lengths)} and {len(scores)}), at least one")
    mean_length, mean_score = statistics.fmean(lengths), statistics.fmean(scores)
    spread = sum((x - mean_length) ** 2 for x in lengths)
    if spread == 0:
        return mean_score, 0.0
    slope = sum((x - mean_length) * (y - mean_score) for x, y in zip(lengths, scores)) / spread
    return mean_score - slope * mean_length, slope


@dataclass(frozen=True)
class DebiasedScore:
    """One method: how many responses, their mean length, mean RM score and mean length-debiased score."""

    responses: int
    mean_length: float
    score: float
    debiased: float


def length_debiased_scores(samples: Mapping[str, Sequence[Tuple[float, float]]],
                           reference: Sequence[Tuple[float, float]] = ()) -> Tuple[Dict[str, DebiasedScore],
                                                                                   Tuple[float, float]]:
    """Per method (name → [(length, score)]): mean score and mean residual of the regression fitted on every
    method's samples plus ``reference``. Returns (results, (intercept, slope))."""
    pooled = [pair for values in samples.values() for pair in values] + list(reference)
    intercept, slope = fit_least_squares([x for x, _ in pooled], [y for _, y in pooled])
    results = {}
    for name, values in samples.items():
        if not values:
            raise ValueError(f"{name}: no samples")
        results[name] = DebiasedScore(
            responses=len(values), mean_length=statistics.fmean(x for x, _ in values),
            score=statistics.fmean(y for _, y in values),
            debiased=statistics.fmean(y - (intercept + slope * x) for x, y in values))
    return results, (intercept, slope)


def length_counter(tokenizer: Optional[str]) -> Callable[[str], int]:
    """Response → length: tokens of ``tokenizer`` (a path or model name) or whitespace-separated words."""
    if tokenizer is None:
        return lambda text: len(text.split())
    from transformers import AutoTokenizer

    from dschat.model.loading import resolve_model_path

    loaded = AutoTokenizer.from_pretrained(resolve_model_path(tokenizer))
    return lambda text: len(loaded.encode(text, add_special_tokens=False))


def read_length_scores(path: str, count: Callable[[str], int]) -> List[Tuple[float, float]]:
    """(length, score) per row of a score JSONL file."""
    pairs = []
    for number, row in read_jsonl(path):
        try:
            score = float(row["score"])
            length = next((float(row[k]) for k in LENGTH_KEYS if k in row), None)
            pairs.append((length if length is not None else float(count(row["response"])), score))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path} row {number}: needs a numeric 'score' and a 'response' or 'length'") from None
    if not pairs:
        raise ValueError(f"{path}: no rows")
    return pairs


def format_debiased(results: Mapping[str, DebiasedScore], fit: Tuple[float, float],
                    paper: Optional[Mapping[str, Tuple[float, float]]] = None) -> str:
    intercept, slope = fit
    lines = [f"Length-debiased RM score (OLS over all responses: score = {intercept:.3f} + {slope:.4f} * length)",
             f"{'method':<12}{'n':>6}{'length':>9}{'RM score':>10}{'debiased':>10}" +
             (f"{'paper RM':>10}{'paper deb.':>11}" if paper else "")]
    for name, r in results.items():
        line = f"{name:<12}{r.responses:>6}{r.mean_length:>9.1f}{r.score:>10.3f}{r.debiased:>10.3f}"
        if paper and name in paper:
            line += f"{paper[name][0]:>10.2f}{paper[name][1]:>11.2f}"
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--scores", nargs="+", required=True, metavar="NAME=JSONL",
                        help="score files of the methods to report (rows: response, score)")
    parser.add_argument("--reference", nargs="*", default=[], metavar="JSONL",
                        help="extra scored responses used in the regression only (e.g. dataset references)")
    parser.add_argument("--tokenizer", default=None, help="count lengths in this tokenizer's tokens")
    parser.add_argument("--paper", default=None, metavar="TASK:SIZE",
                        help="show the review discussion's numbers, e.g. tldr:2b or hh-rlhf:7b")
    args = parser.parse_args(argv)
    from evaluation.paper_numbers import LENGTH_DEBIASED_RM_SCORE
    from evaluation.plots import parse_named_paths

    try:
        paper = None
        if args.paper:
            task, _, size = args.paper.partition(":")
            if (task, size) not in LENGTH_DEBIASED_RM_SCORE:
                raise ValueError(f"--paper {args.paper}: choose one of "
                                 f"{', '.join(':'.join(k) for k in LENGTH_DEBIASED_RM_SCORE)}")
            paper = LENGTH_DEBIASED_RM_SCORE[(task, size)]
        count = length_counter(args.tokenizer)
        samples = {name: read_length_scores(path, count)
                   for name, path in parse_named_paths(args.scores, "--scores").items()}
        reference = [pair for path in args.reference for pair in read_length_scores(path, count)]
        results, fit = length_debiased_scores(samples, reference)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(format_debiased(results, fit, paper))


if __name__ == "__main__":
    main()
