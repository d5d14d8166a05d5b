"""Matplotlib (Agg) renderings of the paper's figures from this repository's evaluation outputs.

    python -m evaluation.plots distributions --scores ppo=ppo.jsonl mappo=mappo.jsonl --out fig3.png
    python -m evaluation.plots distributions --scores sft=sft.jsonl ppo=ppo.jsonl mappo=mappo.jsonl \\
        --baseline sft --out fig10.png
    python -m evaluation.plots winrates --summary tldr.json hh.json webgpt.json --out fig4.png

Training curves (Fig. 2, 11) are drawn by ``python -m evaluation.curves``; best-of-N heat maps and temperature
sweeps (Fig. 8, 21) by ``python -m evaluation.best_of_n``. Score files are JSONL with a numeric "score" per line
(what ``evaluation.rm_score`` writes); summaries are the ``--summary`` JSON of ``evaluation.judge``.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from evaluation.methods import method_color  # noqa: E402
from dschat.core.entrypoint import ArgumentParser
from evaluation.jsonl import read_jsonl

COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]
ALL_METHODS_TITLE = "RM score distribution"


def save_figure(fig, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_training_curves(curves, baseline: str, parities: Mapping, path: str, title: str) -> None:
    """Fig. 2: test RM score vs PPO step per method (markers; band = ±1 std across runs when there are several),
    the smoothed training reward (dashed), the baseline's final score (dotted) and the parity steps."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for c in curves:
        color = method_color(c.name)
        label = f"{c.name} test RM score" + (f" (mean of {c.runs} runs)" if c.runs > 1 else "")
        ax.plot(c.eval_score.steps, c.eval_score.values, "o-", color=color, label=label)
        if c.eval_score_std is not None:
            low = [m - s for m, s in zip(c.eval_score.values, c.eval_score_std)]
            high = [m + s for m, s in zip(c.eval_score.values, c.eval_score_std)]
            ax.fill_between(c.eval_score.steps, low, high, color=color, alpha=0.2)
        if len(c.train_score):
            ax.plot(c.train_score.steps, c.train_score.values, "--", color=color, alpha=0.6,
                    label=f"{c.name} training reward (EMA)")
    base = next(c for c in curves if c.name == baseline)
    ax.axhline(base.eval_score.values[-1], color="gray", linestyle=":", label=f"{baseline} {base.last_label}")
    notes = []
    for c in curves:
        color = method_color(c.name)
        parity = parities.get(c.name)
        if parity is None:
            continue
        ax.axvline(parity.baseline_step, color=method_color(baseline), linestyle=":", alpha=0.7)
        if parity.method_step is not None:
            ax.axvline(parity.method_step, color=color, linestyle=":", alpha=0.9)
        base_runs = next(x.runs for x in curves if x.name == baseline)
        notes.append((f"{c.name} reaches {baseline}'s final score at step {parity.method_step:.0f} vs "
                      f"{parity.baseline_step:.0f}: {parity.speedup:.2f}x faster"
                      if parity.speedup else f"{c.name}: no parity speed-up measurable")
                     + f" (n = {c.runs} / {base_runs} seeds)")
    if notes:
        ax.text(0.02, 0.97, "\n".join(notes), transform=ax.transAxes, va="top", fontsize=9,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8})
    ax.set_xlabel("PPO step")
    ax.set_ylabel("RM score")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_l2_norms(curves, path: str) -> None:
    """Fig. 11: L2 norm of the token advantages (left) and of the Q-values / returns (right) over training."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, attribute, label in zip(axes, ("advantage_l2", "return_l2"), ("advantages", "Q-values (returns)")):
        for c in curves:
            series = getattr(c, attribute)
            ax.plot(series.steps, series.values, "o-", color=method_color(c.name), markersize=3, label=c.name)
        ax.set_xlabel("PPO step")
        ax.set_ylabel(f"L2 norm of {label}")
        ax.set_title(f"L2 norm of {label} (EMA; cf. paper Fig. 11)")
        ax.grid(alpha=0.3)
        ax.legend()
    save_figure(fig, path)


def plot_score_histograms(panels: Sequence[Tuple[str, Mapping[str, Sequence[float]]]], path: str,
                          suptitle: Optional[str] = None) -> None:
    """Fig. 3 / 10 / 20: overlaid RM-score histograms, one panel per comparison, shared bins per panel, with
    each method's mean as a vertical line."""
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.4, 4.6 * len(panels)), 4.2), squeeze=False,
                             layout="constrained")
    if len(panels) == 1 and suptitle:  # one panel: the title goes on it, above the comparison it shows
        title, groups = panels[0]
        panels, suptitle = [(suptitle if title == ALL_METHODS_TITLE else f"{suptitle}\n{title}", groups)], None
    for ax, (title, groups) in zip(axes[0], panels):
        every = [s for scores in groups.values() for s in scores]
        low, high = min(every), max(every)
        bins = [low + (high - low) * i / 25 for i in range(26)] if high > low else 10
        for name, scores in groups.items():
            color = method_color(name)
            mean = sum(scores) / len(scores)
            ax.hist(scores, bins=bins, color=color, alpha=0.45, label=f"{name} (mean {mean:.2f}, n={len(scores)})")
            ax.axvline(mean, color=color, linestyle="--")
        ax.set_title(title)
        ax.set_xlabel("RM score")
        ax.set_ylabel("responses")
        ax.legend(fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_win_rates(summaries: Sequence[Mapping], path: str) -> None:
    """Fig. 4 / 17: stacked horizontal win / tie / loss bars of A against B, one bar per (comparison,
    criterion), from ``evaluation.judge --summary`` files; each bar names its pair count, and a judge that answered
    by position (the summary's ``position_bias``) is marked on its bar."""
    rows = []
    for summary in summaries:
        for criterion, counts in summary["criteria"].items():
            suffix = "" if len(summary["criteria"]) == 1 else f" [{criterion}]"
            bias = "\nPOSITION BIAS: one letter for nearly every pair" if summary.get("position_bias") else ""
            rows.append((f"{summary['task']}: {summary['a']} vs {summary['b']}{suffix} "
                         f"(n={summary.get('pairs', '?')}){bias}", counts))
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.8), layout="constrained")
    for y, (label, counts) in enumerate(reversed(rows)):
        left = 0.0
        for key, color in (("win_rate", "#2ca02c"), ("tie_rate", "#bbbbbb"), ("loss_rate", "#d62728")):
            rate = counts[key]  # None (older files: NaN) when every verdict was unparseable
            width = 100 * rate if rate is not None and rate == rate else 0.0
            ax.barh(y, width, left=left, color=color, label=key[:-5] if y == 0 else None)
            if width >= 6:
                ax.text(left + width / 2, y, f"{width:.0f}%", ha="center", va="center", fontsize=8)
            left += width
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)], fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of judged pairs (A's win / tie / loss)")
    ax.set_title(f"LLM-judge win rates (judge: {summaries[0]['model']}; cf. paper Fig. 4)")
    fig.legend(loc="outside lower center", ncol=3, fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_best_of_n_heatmaps(tables: Mapping[str, Mapping[float, Mapping[int, float]]], path: str, prompts: int,
                            samples: int) -> None:
    """Fig. 8: expected best-of-N RM score per temperature (rows) and N (columns), one heat map per method,
    on a shared colour scale; the title says over how many prompts (``samples`` each per temperature)."""
    methods = list(tables)
    values = [v for t in tables.values() for row in t.values() for v in row.values()]
    fig, axes = plt.subplots(1, len(methods), figsize=(4.3 * len(methods) + 1, 4.2), squeeze=False,
                             layout="constrained")
    image = None
    for index, (ax, method) in enumerate(zip(axes[0], methods)):
        temperatures = sorted(tables[method])
        ns = sorted(tables[method][temperatures[0]])
        grid = [[tables[method][t][n] for n in ns] for t in temperatures]
        image = ax.imshow(grid, cmap="viridis", vmin=min(values), vmax=max(values), aspect="auto", origin="lower")
        middle = (min(values) + max(values)) / 2
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if value > middle else "white")
        ax.set_xticks(range(len(ns)), [str(n) for n in ns])
        ax.set_yticks(range(len(temperatures)), [f"{t:g}" for t in temperatures])
        ax.set_xlabel("N (best-of-N)")
        if index == 0:
            ax.set_ylabel("sampling temperature")
        ax.set_title(method)
    fig.colorbar(image, ax=list(axes[0]), shrink=0.85, label="RM score")
    fig.suptitle(f"Best-of-N RM score vs temperature (cf. paper Fig. 8): mean over {prompts} prompts, "
                 f"{samples} samples each per temperature")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_temperature_sweep(sweeps: Mapping[str, Mapping[float, Tuple[float, float]]], path: str,
                           prompts: int) -> None:
    """Fig. 21: mean RM score of single samples vs sampling temperature per method (error bars: standard error
    over the ``prompts`` prompts, as the figure says)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, sweep in sweeps.items():
        temperatures = sorted(sweep)
        ax.errorbar(temperatures, [sweep[t][0] for t in temperatures], yerr=[sweep[t][1] for t in temperatures],
                    fmt="o-", color=method_color(method), capsize=3, label=method)
    ax.set_xlabel("sampling temperature")
    ax.set_ylabel("mean RM score (N = 1)")
    ax.set_title(f"RM score vs sampling temperature (cf. paper Fig. 21)\n{prompts} prompts; error bars: "
                 "±1 standard error over prompts", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def read_scores(path: str) -> List[float]:
    """The "score" of every line of a score JSONL file."""
    scores = []
    for number, row in read_jsonl(path):
        try:
            scores.append(float(row["score"]))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path} row {number}: needs a numeric 'score'") from None
    if not scores:
        raise ValueError(f"{path}: no scores")
    return scores


def parse_named_paths(specs: Sequence[str], flag: str) -> Dict[str, str]:
    named = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{flag} {spec!r}: expected NAME=PATH")
        named[name] = path
    return named


def distribution_panels(scores: Mapping[str, Sequence[float]], baseline: Optional[str]
                        ) -> List[Tuple[str, Dict[str, Sequence[float]]]]:
    """One panel with every method (Fig. 3), or one panel per method against ``baseline`` (Fig. 10 / 20)."""
    if baseline is None:
        return [(ALL_METHODS_TITLE, dict(scores))]
    if baseline not in scores:
        raise ValueError(f"--baseline {baseline}: not one of the --scores names ({', '.join(scores)})")
    return [(f"{name} vs {baseline}", {baseline: scores[baseline], name: values})
            for name, values in scores.items() if name != baseline]


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    dist = commands.add_parser("distributions", help="RM score histograms (Fig. 3, 10, 20)")
    dist.add_argument("--scores", nargs="+", required=True, metavar="NAME=JSONL")
    dist.add_argument("--baseline", default=None, help="NAME every other method is drawn against (Fig. 10/20)")
    dist.add_argument("--title", default=None)
    dist.add_argument("--out", required=True)
    wins = commands.add_parser("winrates", help="judge win / tie / loss bars (Fig. 4, 17)")
    wins.add_argument("--summary", nargs="+", required=True, metavar="JSON", help="evaluation.judge --summary files")
    wins.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "distributions":
            scores = {name: read_scores(path) for name, path in parse_named_paths(args.scores, "--scores").items()}
            plot_score_histograms(distribution_panels(scores, args.baseline), args.out, args.title)
        else:
            summaries = []
            for path in args.summary:
                if not os.path.exists(path):
                    raise FileNotFoundError(f"{path}: no such file")
                with open(path) as handle:
                    summaries.append(json.load(handle))
                if summaries[-1].get("position_bias"):
                    print(f"warning: {path}: {summaries[-1].get('position_bias_line') or 'position bias'} "
                          "(marked on its bar)", file=sys.stderr)
            plot_win_rates(summaries, args.out)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
