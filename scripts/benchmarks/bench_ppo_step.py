#!/usr/bin/env python
"""Seconds per PPO iteration (``PPOTrainer.step``: sample, score, advantages, update) for several step-3 flag
sets, measured in one process on the same prompts, and the ratio of each to the first.

Method (so the figures mean what they say on a shared, noisy machine):
- every variant builds its own actor / reference / critic / reward engines from the same checkpoints;
- repetition r runs every variant once on the same prompt batch with the same seed, in an order ROTATED by r
  (A B C, B C A, C A B, ...), so neither a drift in machine load nor a warm-cache advantage follows the order;
- each step is timed with the process's CPU time (user + system, ``time.process_time``) and wall time;
- printed: median and spread [min, max] of both per variant, and the median [min, max] of the per-repetition
  ratio to the first variant (paired within a repetition). Quote the median; a wide spread says the machine
  was noisy;
- then the step's own split per variant (wall seconds, median over the repetitions, from the step's ``timing/*``
  metrics: generate, weight sync, scoring, the experience's other forwards, the update): what each variant's
  step time is made of, and so what a change of one part (e.g. ``--rollout_engine``) predicts for the whole.

Variants: the termination rules by default (paper §E: macro actions add no cost beyond the rule), or any
``--variant NAME=FLAGS``. ``--common`` flags go to every variant (default: the demo's step-3 sampling and batch
settings, scripts/demo_flags.sh). Trained checkpoints (``--actor``, ``--critic``) give realistic response
lengths; ``tiny-gemma`` (random weights) rarely stops before ``--max_new_tokens``.

    python scripts/benchmarks/bench_ppo_step.py --repeats 8
    python scripts/benchmarks/bench_ppo_step.py --actor outputs/demo/sft --critic outputs/demo/rm \\
        --variant "max24=--max_new_tokens 24" --variant "max192=--max_new_tokens 192"
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from repeats import rotated, spread  # noqa: E402
TERMINATION_VARIANTS = {
    "ppo (fixed n=1)": "--termination fixed --ngram 1",
    "fixed n=5": "--termination fixed --ngram 5",
    "randomized": "--termination randomized",
    "ppl": "--termination ppl",
    "parsing (spacy)": "--termination parsing --parser spacy",
}
SPLIT = ("generate", "weight_sync", "score", "experience", "train")
"""The parts of a step the trainer times (``timing/*`` metrics), in the order they run."""
DEMO_COMMON = ("--max_prompt_seq_len 32 --max_new_tokens 24 --per_device_generation_batch_size 32 "
               "--per_device_train_batch_size 16 --kl_coef 0.05 --warmup_steps 0")


def build_trainer(flags: list, tokenizer, world_size: int = 1, rank: int = 0):
    """``(trainer, config)``: step 3's trainer for ``flags``, built as ``python -m dschat.cli.ppo`` builds it."""
    from dschat.cli.ppo import build_parser
    from dschat.stages import ppo
    from dschat.stages.resolve import resolve
    from dschat.rlhf.reward_sources import ModelReward
    from dschat.rlhf.rlhf_engine import RLHFEngine

    args = resolve("ppo", build_parser().parse_config(flags), world_size)
    torch.manual_seed(args.seed)
    engines = RLHFEngine(args, tokenizer, world_size, num_iterations=10**6)
    reward = ModelReward(engines.reward, args.per_device_train_batch_size)
    return ppo.make_trainer(args, engines, tokenizer, reward, world_size, rank), args


def parse_variants(specs: list, parser) -> dict:
    variants = {}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not name:
            parser.error(f"--variant {spec!r}: expected NAME=FLAGS")
        variants[name] = flags
    return variants


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=6, help="timed repetitions (one step of every variant each)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions first")
    parser.add_argument("--actor", default="tiny-gemma", help="actor / reference checkpoint (an SFT model)")
    parser.add_argument("--critic", default="tiny-gemma", help="critic and reward-model checkpoint (an RM)")
    parser.add_argument("--common", default=DEMO_COMMON, help="step-3 flags given to every variant")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="a variant's own step-3 flags (repeatable); default: the termination rules")
    parser.add_argument("--variants", default=None,
                        help="comma-separated subset of the built-in termination variants: " + ", ".join(TERMINATION_VARIANTS))
    args = parser.parse_args(argv)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    sys.path.insert(0, ROOT)
    from dschat.data import PromptCollator, PromptDataset, load_pairs
    from dschat.core.distributed import init_distributed
    from dschat.model import load_tokenizer

    if args.variant:
        variants = parse_variants(args.variant, parser)
    else:
        names = args.variants.split(",") if args.variants else list(TERMINATION_VARIANTS)
        unknown = [name for name in names if name not in TERMINATION_VARIANTS]
        if unknown:
            parser.error(f"--variants: unknown {unknown}; expected some of {list(TERMINATION_VARIANTS)}")
        variants = {name: TERMINATION_VARIANTS[name] for name in names}
    init_distributed()
    tokenizer = load_tokenizer(args.actor, padding_side="left")
    output_dir = tempfile.mkdtemp(prefix="bench_ppo_step_")
    common = ["--output_dir", output_dir, "--actor_model_name_or_path", args.actor,
              "--critic_model_name_or_path", args.critic] + shlex.split(args.common)
    trainers = {name: build_trainer(common + shlex.split(flags), tokenizer) for name, flags in variants.items()}
    names = list(variants)
    first_args = trainers[names[0]][1]
    prompts = [pair.prompt for pair in load_pairs("synthetic", "validation")]
    dataset = PromptDataset(prompts, tokenizer, first_args.max_prompt_seq_len)
    collate = PromptCollator.for_tokenizer(tokenizer)
    size = first_args.per_device_generation_batch_size
    repetitions = args.warmup + args.repeats
    if size * repetitions > len(dataset):
        parser.error(f"{repetitions} repetitions of {size} prompts need {size * repetitions}; "
                     f"the synthetic validation split has {len(dataset)}")
    cpu = {name: [] for name in names}
    wall = {name: [] for name in names}
    lengths = {name: [] for name in names}
    split = {name: {part: [] for part in SPLIT} for name in names}
    for repetition in range(repetitions):
        batch = collate([dataset[i] for i in range(repetition * size, (repetition + 1) * size)])
        for name in rotated(names, repetition):
            torch.manual_seed(repetition)  # the same sampling randomness for every variant
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            metrics, _ = trainers[name][0].step(batch)
            cpu_time, wall_time = time.process_time() - cpu_start, time.perf_counter() - wall_start
            if repetition >= args.warmup:
                cpu[name].append(cpu_time)
                wall[name].append(wall_time)
                lengths[name].append(metrics["response/length"])
                for part in SPLIT:
                    split[name][part].append(float(metrics[f"timing/{part}"]))
    print(f"per PPO iteration, median [min, max] over {args.repeats} repetitions (rotated order, {args.warmup} "
          f"warm-up), torch threads {torch.get_num_threads()}; common flags: {args.common}")
    header = (f"{'variant':<22}{'cpu s':>24}{'wall s':>24}{'cpu ratio to first':>26}{'wall ratio':>24}"
              f"{'resp. len':>10}")
    print(header)
    print("-" * len(header))
    for name in names:
        cpu_ratio = [a / b for a, b in zip(cpu[name], cpu[names[0]])]
        wall_ratio = [a / b for a, b in zip(wall[name], wall[names[0]])]
        print(f"{name:<22}{spread(cpu[name]):>24}{spread(wall[name]):>24}{spread(cpu_ratio):>26}"
              f"{spread(wall_ratio):>24}{statistics.mean(lengths[name]):>10.1f}")
    for name in names:
        print(f"  {name}: {variants[name]}")
    print("the step's split, wall s (median over the repetitions of timing/*):")
    print(f"{'variant':<22}" + "".join(f"{part:>14}" for part in SPLIT) + f"{'sum':>10}")
    for name in names:
        medians = [statistics.median(split[name][part]) for part in SPLIT]
        print(f"{name:<22}" + "".join(f"{value:>14.3f}" for value in medians) + f"{sum(medians):>10.3f}")


if __name__ == "__main__":
    main()
