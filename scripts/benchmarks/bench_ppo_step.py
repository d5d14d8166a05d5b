#!/usr/bin/env python
"""MA-PPO step time / vanilla PPO step time on the tiny CPU model, measured in one run (paper §E: macro
actions add no cost beyond the termination rule).

Every variant trains the same tiny Gemma actor/critic/reward models on the same prompts; variants are
interleaved round-robin so drifts in machine load hit them equally. Prints median seconds per PPO iteration
and the ratio to vanilla PPO (``fixed``, n = 1).

    python scripts/benchmarks/bench_ppo_step.py --steps 8
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANTS = {
    "ppo (fixed n=1)": ["--termination", "fixed", "--ngram", "1"],
    "fixed n=5": ["--termination", "fixed", "--ngram", "5"],
    "randomized": ["--termination", "randomized"],
    "ppl": ["--termination", "ppl"],
    "parsing (spacy)": ["--termination", "parsing", "--parser", "spacy"],
}


def build_trainer(flags: list, tokenizer, world_size: int = 1, rank: int = 0):
    """Step 3's trainer for ``flags``, built as ``python -m dschat.cli.ppo`` builds it."""
    from dschat.cli import ppo
    from dschat.rlhf.reward_sources import ModelReward
    from dschat.rlhf.rlhf_engine import RLHFEngine

    args = ppo.resolve_batches(ppo.resolve_models(ppo.resolve_algorithm(ppo.build_parser().parse_config(flags))),
                               world_size)
    torch.manual_seed(args.seed)
    engines = RLHFEngine(args, tokenizer, world_size, num_update_steps=10**6)
    return ppo.make_trainer(args, engines, tokenizer, ModelReward(engines.reward), world_size, rank)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="timed PPO iterations per variant")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations per variant")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=48)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of: " + ", ".join(VARIANTS))
    args = parser.parse_args(argv)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    sys.path.insert(0, ROOT)
    from dschat.utils.data import PromptCollator, PromptDataset, load_pairs
    from dschat.utils.distributed import init_distributed
    from dschat.utils.model import load_tokenizer

    init_distributed()
    tokenizer = load_tokenizer("tiny-gemma", padding_side="left")
    prompts = [pair.prompt for pair in load_pairs("synthetic", "validation")]
    dataset = PromptDataset(prompts, tokenizer, 64)
    collate = PromptCollator.for_tokenizer(tokenizer)
    batches = [collate([dataset[i] for i in range(start, start + args.batch_size)])
               for start in range(0, args.batch_size * (args.steps + args.warmup), args.batch_size)]
    common = ["--output_dir", "/tmp/unused", "--actor_model_name_or_path", "tiny-gemma",
              "--critic_model_name_or_path", "tiny-gemma", "--max_new_tokens", str(args.max_new_tokens),
              "--per_device_generation_batch_size", str(args.batch_size),
              "--per_device_train_batch_size", str(args.batch_size), "--warmup_steps", "0"]
    names = args.variants.split(",")
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; expected some of {list(VARIANTS)}")
    trainers = {name: build_trainer(common + VARIANTS[name], tokenizer) for name in names}
    times = {name: [] for name in names}
    for index, batch in enumerate(batches):
        for name, trainer in trainers.items():
            torch.manual_seed(index)  # same sampling randomness for every variant
            start = time.perf_counter()
            trainer.step(batch)
            if index >= args.warmup:
                times[name].append(time.perf_counter() - start)
    baseline = statistics.median(times[names[0]])
    print(f"{'variant':<20} {'median s/iter':>14} {'ratio to PPO':>13}   (batch {args.batch_size}, "
          f"{args.max_new_tokens} new tokens, {args.steps} timed iterations, torch threads {torch.get_num_threads()})")
    for name in names:
        median = statistics.median(times[name])
        print(f"{name:<20} {median:>14.3f} {median / baseline:>13.3f}")


if __name__ == "__main__":
    main()
