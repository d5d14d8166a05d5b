"""Best-of-N x temperature (paper Fig. 8) and the temperature sweep (Fig. 21) for SFT, PPO and MA-PPO.

    python -m evaluation.best_of_n --policy sft=outputs/demo/sft --policy ppo=outputs/demo/ppo \\
        --policy mappo=outputs/demo/mappo --reward_model outputs/demo/rm --data_name synthetic \\
        --num_prompts 8 --temperatures 0.2,0.6,1.0 --ns 1,2,4 --output_dir outputs/fig8

For each policy and temperature, ``max(N)`` responses are sampled per held-out prompt and scored by the reward
model (``evaluation.rm_score.score_policy``; samples are kept in ``OUTPUT_DIR/samples/`` and reused). The
best-of-N score of a prompt is the expected maximum RM score of N responses drawn from its samples (the unbiased
order-statistics estimator, so every N uses all samples), averaged over prompts; the N = 1 value is the mean
score, which is Fig. 21's temperature sweep. The paper's grid is N in {4, 8, 16, 32}, T in {0.2, ..., 1.2}
(§4.4); the defaults here are CPU-sized.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
from typing import Dict, List, Mapping, Sequence, Tuple
from dschat.core.entrypoint import ArgumentParser

PAPER_NS = (4, 8, 16, 32)
PAPER_TEMPERATURES = (0.2, 0.4, 0.6, 0.8, 1.0, 1.2)


def expected_best_of_n(scores: Sequence[float], n: int) -> float:
    """E[max of n responses drawn without replacement from ``scores``]: with the scores sorted ascending, the
    i-th smallest (1-based) is the maximum of C(i-1, n-1) of the C(len, n) equally likely subsets."""
    if not 1 <= n <= len(scores):
        raise ValueError(f"best-of-{n} needs at least {n} samples, got {len(scores)}")
    ordered = sorted(scores)
    total = math.comb(len(ordered), n)
    return sum(math.comb(i, n - 1) * s for i, s in enumerate(ordered) if i >= n - 1) / total


def best_of_n_table(per_prompt_scores: Mapping[float, Sequence[Sequence[float]]], ns: Sequence[int]
                    ) -> Dict[float, Dict[int, float]]:
    """Temperature → N → mean over prompts of the expected best-of-N score (Fig. 8's heat map of one method)."""
    return {t: {n: statistics.fmean(expected_best_of_n(p, n) for p in prompts) for n in ns}
            for t, prompts in per_prompt_scores.items()}


def temperature_sweep(per_prompt_scores: Mapping[float, Sequence[Sequence[float]]]
                      ) -> Dict[float, Tuple[float, float]]:
    """Temperature → (mean RM score of single samples, standard error over prompts) (Fig. 21)."""
    sweep = {}
    for t, prompts in per_prompt_scores.items():
        means = [statistics.fmean(p) for p in prompts]
        sem = statistics.stdev(means) / math.sqrt(len(means)) if len(means) > 1 else 0.0
        sweep[t] = (statistics.fmean(means), sem)
    return sweep


def group_by_prompt(rows: Sequence[Mapping], samples_per_prompt: int) -> List[List[float]]:
    """Scores grouped per prompt: rows carry the ``index`` of their entry in the prompt list in which each prompt
    was repeated ``samples_per_prompt`` times (``score_policy`` leaves out prompts that are too long)."""
    groups: Dict[int, List[float]] = {}
    for row in rows:
        groups.setdefault(int(row["index"]) // samples_per_prompt, []).append(float(row["score"]))
    incomplete = [p for p, scores in groups.items() if len(scores) != samples_per_prompt]
    if incomplete:
        raise ValueError(f"prompt {incomplete[0]} has {len(groups[incomplete[0]])} samples, "
                         f"expected {samples_per_prompt}")
    if not groups:
        raise ValueError("no scored samples (every prompt longer than --max_prompt_len?)")
    return [groups[p] for p in sorted(groups)]


def sample_scores(policy: str, reward_model: str, prompts: Sequence[str], temperature: float,
                  samples_per_prompt: int, args, cache_path: str) -> List[List[float]]:
    """Per-prompt RM scores of ``samples_per_prompt`` responses at ``temperature`` (read from ``cache_path`` when
    it holds exactly these prompts and settings, else sampled with ``evaluation.rm_score.score_policy`` and
    written there)."""
    repeated = [p for p in prompts for _ in range(samples_per_prompt)]
    settings = {"temperature": temperature, "max_new_tokens": args.max_new_tokens, "seed": args.seed}
    if os.path.exists(cache_path):
        with open(cache_path) as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        if rows and all(r.get("index", -1) < len(repeated) and r.get("prompt") == repeated[r["index"]]
                        and all(r.get(k) == v for k, v in settings.items()) for r in rows):
            return group_by_prompt(rows, samples_per_prompt)
    from evaluation.rm_score import score_policy

    rows = score_policy(policy, reward_model, repeated, temperature=temperature,
                        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=args.seed,
                        max_prompt_len=args.max_prompt_len,
                        progress=None if args.no_progress_bar else os.path.splitext(os.path.basename(cache_path))[0])
    os.makedirs(os.path.dirname(cache_path), exist_ok=True)
    with open(cache_path, "w") as handle:
        for row in rows:
            handle.write(json.dumps({**row, **settings}) + "\n")
    return group_by_prompt(rows, samples_per_prompt)


def format_table(tables: Mapping[str, Mapping[float, Mapping[int, float]]]) -> str:
    lines = []
    for method, table in tables.items():
        ns = sorted(next(iter(table.values())))
        lines.append(f"{method}: best-of-N RM score" + "".join(f"{f'N={n}':>9}" for n in ns))
        for t in sorted(table):
            lines.append(f"{'':<{len(method)}}  T={t:<4g}{'':<16}" + "".join(f"{table[t][n]:>9.3f}" for n in ns))
    return "\n".join(lines)


def _floats(text: str) -> Tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _ints(text: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--policy", action="append", required=True, metavar="NAME=DIR",
                        help="a policy (SFT directory or step-3 output directory); repeat")
    parser.add_argument("--reward_model", required=True, help="reward model directory (step 2 output)")
    parser.add_argument("--data_name", default="synthetic", help="dataset adapter of the held-out prompts")
    parser.add_argument("--data_path", default=None, help="local file in the dataset's schema")
    parser.add_argument("--num_prompts", type=int, default=8, help="held-out prompts (first N of the split)")
    parser.add_argument("--temperatures", type=_floats, default=(0.2, 0.6, 1.0, 1.2),
                        help="comma-separated (paper: 0.2,0.4,0.6,0.8,1.0,1.2)")
    parser.add_argument("--ns", type=_ints, default=(1, 2, 4, 8), help="comma-separated N (paper: 4,8,16,32)")
    parser.add_argument("--max_new_tokens", type=int, default=24)
    parser.add_argument("--max_prompt_len", type=int, default=512, help="longer prompts are skipped")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--output_dir", required=True, help="samples/, best_of_n.json, fig8.png, fig21.png")
    parser.add_argument("--no_progress_bar", action="store_true")
    args = parser.parse_args(argv)
    from evaluation.plots import parse_named_paths, plot_best_of_n_heatmaps, plot_temperature_sweep

    try:
        policies = parse_named_paths(args.policy, "--policy")
        for name, path in {**policies, "reward": args.reward_model}.items():
            if not os.path.isdir(path):
                raise FileNotFoundError(f"{name}: {path} is not a directory")
        from dschat.data import load_pairs

        prompts = [pair.prompt for pair in load_pairs(args.data_name, split="validation",
                                                      data_path=args.data_path)][:args.num_prompts]
        samples_per_prompt = max(args.ns)
        per_prompt = {
            name: {t: sample_scores(path, args.reward_model, prompts, t, samples_per_prompt, args,
                                    os.path.join(args.output_dir, "samples", f"{name}_T{t:g}.jsonl"))
                   for t in args.temperatures}
            for name, path in policies.items()}
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    tables = {name: best_of_n_table(scores, args.ns) for name, scores in per_prompt.items()}
    sweeps = {name: temperature_sweep(scores) for name, scores in per_prompt.items()}
    scored = len(next(iter(next(iter(per_prompt.values())).values())))
    print(f"{scored} prompts x {samples_per_prompt} samples per temperature")
    print(format_table(tables))
    with open(os.path.join(args.output_dir, "best_of_n.json"), "w") as handle:
        json.dump({name: {f"{t:g}": {str(n): v for n, v in row.items()} for t, row in table.items()}
                   for name, table in tables.items()}, handle, indent=2)
    plot_best_of_n_heatmaps(tables, os.path.join(args.output_dir, "fig8.png"), scored, samples_per_prompt)
    plot_temperature_sweep(sweeps, os.path.join(args.output_dir, "fig21.png"), scored)
    print(f"wrote {args.output_dir}/fig8.png and {args.output_dir}/fig21.png")


if __name__ == "__main__":
    main()
