#!/usr/bin/env python
"""What ``--async_rollout 1`` would give the Gemma-7B TL;DR launcher with generation on GPUs of its own: a
projection from phase times measured on one H100 at the Gemma-2B shape, not a measurement (no GPU producer exists).

Measured inputs (each printed with its source): the HF engine's decode step at 8 and 64 prompts per GPU
(``docs/rollout/bench_generate_h100.txt``, dynamic cache and compiled), and one actor optimizer step on 2 x 1024
tokens (``docs/memory_plan.md``, ``gemma2b_shape.py``). The launcher: ``configs/ppo/gemma-7b/tldr.yaml`` (256
prompts, 512 + 512 tokens, 8 GPUs as the memory plan sizes it).

Assumptions (the projection is only as good as these):
1. Gemma-7B's phase times are Gemma-2B's times the ratio of their parameter counts (the memory plan's torch-free
   counts): decoding is memory-bound and training compute-bound, both roughly linear in parameters.
2. A decode step's time depends on the prompts per GPU linearly between the measured 8 and 64 (extrapolated
   beyond 64), and a rollout takes ``new_tokens`` steps (no early stop).
3. A PPO iteration's training work per token is the actor's and the critic's forward + backward and the reference's
   and reward model's forwards: 2 + 2/3 actor-step equivalents (a forward is a third of a forward + backward), spread
   evenly over the training GPUs; ZeRO-3's communication is taken as unchanged by the split.
4. Synchronous: all GPUs generate, then all train. K = 1: G_r GPUs generate while 8 − G_r train, and each
   iteration adds one weight transfer of the bf16 actor at ``--nccl_gb_s`` (default 50 GB/s).
Printed: seconds per iteration, synchronous and for each split, and the best split's speed-up.

    python scripts/benchmarks/project_async.py
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from dschat.cli.plan import model_shape  # noqa: E402
from dschat.core.entrypoint import ArgumentParser  # noqa: E402

DECODE_MS = {"dynamic cache": {8: 21.29, 64: 24.38}, "static cache + compile": {8: 4.69, 64: 8.22}}
"""ms per decode step at 8 and 64 prompts, one H100, Gemma-2B shape, bf16 (docs/rollout/bench_generate_h100.txt)."""
ACTOR_STEP = (2 * 1024, 0.110)
"""(tokens, seconds) of one actor optimizer step, one H100, Gemma-2B shape, bf16 (docs/memory_plan.md)."""
LAUNCHER = {"prompts": 256, "prompt_tokens": 512, "new_tokens": 512, "gpus": 8}
"""configs/ppo/gemma-7b/tldr.yaml (global batch 256, Table 5 lengths) on the 8 GPUs the memory plan gives it."""
STEP_EQUIVALENTS = 2 + 2 / 3
"""Actor + critic forward and backward, reference + reward forwards, in actor forward + backward units."""


def decode_ms(profile: dict, prompts_per_gpu: float) -> float:
    """A decode step's ms at ``prompts_per_gpu``, linear through the two measured points."""
    (low, low_ms), (high, high_ms) = sorted(profile.items())
    return low_ms + (high_ms - low_ms) * (prompts_per_gpu - low) / (high - low)


def generate_seconds(profile: dict, scale: float, gpus: int) -> float:
    return decode_ms(profile, LAUNCHER["prompts"] / gpus) * LAUNCHER["new_tokens"] * scale / 1000


def train_seconds(scale: float, gpus: int) -> float:
    tokens = LAUNCHER["prompts"] * (LAUNCHER["prompt_tokens"] + LAUNCHER["new_tokens"]) / gpus
    return tokens * STEP_EQUIVALENTS * ACTOR_STEP[1] / ACTOR_STEP[0] * scale


def projection(profile: dict, scale: float, transfer: float) -> tuple:
    """``(synchronous seconds, {G_r: K = 1 seconds})`` per iteration."""
    gpus = LAUNCHER["gpus"]
    synchronous = generate_seconds(profile, scale, gpus) + train_seconds(scale, gpus)
    split = {g: max(generate_seconds(profile, scale, g), train_seconds(scale, gpus - g)) + transfer
             for g in range(1, gpus)}
    return synchronous, split


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nccl_gb_s", type=float, default=50.0, help="weight transfer GB/s (default 50)")
    args = parser.parse_args()
    params = {name: model_shape(name).params for name in ("gemma-2b", "gemma-7b")}
    scale = params["gemma-7b"] / params["gemma-2b"]
    transfer = 2 * params["gemma-7b"] / (args.nccl_gb_s * 1e9)
    print(f"inputs: decode ms/step at 8 and 64 prompts {DECODE_MS} (bench_generate_h100.txt); actor step "
          f"{ACTOR_STEP[0]} tokens in {ACTOR_STEP[1]} s (memory_plan.md); Gemma-7B / 2B parameters "
          f"{params['gemma-7b']:,} / {params['gemma-2b']:,} = {scale:.2f}; launcher {LAUNCHER}; weight transfer "
          f"{transfer:.2f} s at {args.nccl_gb_s:g} GB/s")
    for name, profile in DECODE_MS.items():
        synchronous, split = projection(profile, scale, transfer)
        best = min(split, key=split.get)
        generate = generate_seconds(profile, scale, LAUNCHER["gpus"])
        print(f"\n{name}: synchronous {synchronous:.1f} s per iteration (generate {generate:.1f} s, train "
              f"{synchronous - generate:.1f} s)")
        print("  K = 1, GPUs generating / training: " + ", ".join(
            f"{g}/{LAUNCHER['gpus'] - g} {seconds:.1f} s" for g, seconds in split.items()))
        print(f"  best split {best}/{LAUNCHER['gpus'] - best}: {split[best]:.1f} s, "
              f"{synchronous / split[best]:.2f}x the synchronous loop's speed")


if __name__ == "__main__":
    main()
