#!/usr/bin/env python
"""Time the vectorised macro-action ops against the per-sample / per-macro loop oracle (tests/macro_oracle.py).

For each termination rule (fixed n-gram, randomized n-gram, perplexity) on a random ragged batch (left-padded
prompts of different lengths, right-padded responses of different lengths) it times three stages:
segmentation, advantages (σ pooling + macro rewards + macro GAE + broadcast) and losses (token-ratio policy
loss, macro-ratio policy loss, clipped value loss), prints milliseconds and the speed-up, and checks that
both implementations agree. Not a test.

    .venv/bin/python scripts/benchmarks/bench_macro_ops.py --batch 64 --tokens 512
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import macro_oracle as oracle  # noqa: E402
from dschat.rlhf.macro_action import (compute_macro_advantages, ngram_segments, policy_loss,  # noqa: E402
                                      ppl_segments, randomized_ngram_segments, shuffled_length_table, value_loss)

CLIP, VALUE_CLIP = 0.2, 0.2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64, help="batch size B")
    parser.add_argument("--tokens", type=int, default=512, help="log-prob positions T per row")
    parser.add_argument("--ngram", type=int, default=5, help="n of the fixed n-gram rule")
    parser.add_argument("--sigma", default="equal", choices=("equal", "unit", "position"), help="macro value σ")
    parser.add_argument("--reward-agg", default="sum", choices=("sum", "mean"), help="macro reward aggregation")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of the vectorised ops (median)")
    parser.add_argument("--oracle-repeats", type=int, default=3, help="timed runs of the loop oracle (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu", help="device of the vectorised ops (the oracle runs in Python)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def make_batch(batch: int, tokens: int, seed: int) -> Dict[str, torch.Tensor]:
    """Ragged float32 experience: response start in [0, T/4), response length in [T/2, T − start]."""
    generator = torch.Generator().manual_seed(seed)
    spans = []
    for _ in range(batch):
        start = int(torch.randint(0, max(tokens // 4, 1), (1,), generator=generator))
        length = int(torch.randint(tokens // 2, tokens - start + 1, (1,), generator=generator))
        spans.append((start, length))
    mask = oracle.action_mask_from_spans(spans, tokens)
    values, old_values, rewards = (torch.randn(batch, tokens, generator=generator) for _ in range(3))
    ref_logprobs = -torch.rand(batch, tokens, generator=generator) * 4
    old_logprobs = ref_logprobs + torch.randn(batch, tokens, generator=generator) * 0.01
    logprobs = old_logprobs + torch.randn(batch, tokens, generator=generator) * 0.01
    return dict(mask=mask, values=values, old_values=old_values, new_values=old_values + 0.1, rewards=rewards,
                ref_logprobs=ref_logprobs, old_logprobs=old_logprobs, logprobs=logprobs)


def timed(function: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median wall time in milliseconds (after one warm-up call)."""
    def synchronise() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    function()
    synchronise()
    times: List[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        synchronise()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cpu = make_batch(args.batch, args.tokens, args.seed)
    on_device = {name: tensor.to(device) for name, tensor in cpu.items()}
    mask = on_device["mask"]

    randomized_seed = args.seed + 1
    table = shuffled_length_table(args.batch, generator=torch.Generator().manual_seed(randomized_seed))
    rules = {
        f"fixed {args.ngram}-gram": (
            lambda: ngram_segments(mask, args.ngram),
            lambda: oracle.fixed_ngram_segmentation(cpu["mask"], args.ngram)),
        "randomized": (
            lambda: randomized_ngram_segments(mask, generator=torch.Generator().manual_seed(randomized_seed)),
            lambda: oracle.table_segmentation(cpu["mask"], table)),
        "ppl": (
            lambda: ppl_segments(on_device["ref_logprobs"], mask),
            lambda: oracle.ppl_segmentation(cpu["ref_logprobs"], cpu["mask"])),
    }

    print(f"batch {args.batch} x {args.tokens} positions, {int(cpu['mask'].sum())} response tokens, "
          f"sigma={args.sigma}, reward_agg={args.reward_agg}, device={device}, threads={args.threads}")
    header = f"{'rule':<16}{'stage':<13}{'macros':>8}{'vectorised ms':>15}{'loop ms':>11}{'speed-up':>10}"
    print(header)
    print("-" * len(header))
    for rule_name, (vectorised_rule, oracle_rule) in rules.items():
        segment_ids = vectorised_rule()
        segmentation = oracle_rule()
        assert segment_ids.cpu().tolist() == oracle.segment_ids(cpu["mask"], segmentation), rule_name
        macros = sum(len(lengths) for lengths in segmentation)

        def vectorised_advantages():
            return compute_macro_advantages(on_device["values"], on_device["rewards"], segment_ids, mask,
                                            args.sigma, args.reward_agg)

        def oracle_advantages():
            return oracle.macro_advantages(cpu["values"], cpu["rewards"], cpu["mask"], segmentation, args.sigma,
                                           args.reward_agg)

        advantages, returns, _ = vectorised_advantages()
        expected_advantages, expected_returns = oracle_advantages()
        error = max((advantages.cpu().double() - torch.tensor(expected_advantages)).abs().max().item(),
                    (returns.cpu().double() - torch.tensor(expected_returns)).abs().max().item())

        def vectorised_losses():
            return (policy_loss(on_device["logprobs"], on_device["old_logprobs"], advantages, mask, CLIP),
                    policy_loss(on_device["logprobs"], on_device["old_logprobs"], advantages, mask, CLIP,
                                segment_ids, "macro"),
                    value_loss(on_device["new_values"], on_device["old_values"], returns, mask, VALUE_CLIP))

        def oracle_losses():
            return (oracle.policy_loss(cpu["logprobs"], cpu["old_logprobs"], expected_advantages, cpu["mask"],
                                       segmentation, CLIP, "token"),
                    oracle.policy_loss(cpu["logprobs"], cpu["old_logprobs"], expected_advantages, cpu["mask"],
                                       segmentation, CLIP, "macro"),
                    oracle.token_critic_loss(cpu["new_values"], cpu["old_values"], expected_returns, cpu["mask"],
                                             VALUE_CLIP))

        stages = {"segmentation": (vectorised_rule, oracle_rule),
                  "advantages": (vectorised_advantages, oracle_advantages),
                  "losses": (vectorised_losses, oracle_losses)}
        total_vectorised = total_loop = 0.0
        for stage, (vectorised, loop) in stages.items():
            fast = timed(vectorised, args.repeats, device)
            slow = timed(loop, args.oracle_repeats, torch.device("cpu"))
            total_vectorised += fast
            total_loop += slow
            print(f"{rule_name:<16}{stage:<13}{macros:>8}{fast:>15.2f}{slow:>11.1f}{slow / fast:>9.1f}x")
        print(f"{rule_name:<16}{'total':<13}{macros:>8}{total_vectorised:>15.2f}{total_loop:>11.1f}"
              f"{total_loop / total_vectorised:>9.1f}x   (max |advantage/return diff| vs oracle {error:.1e})")


if __name__ == "__main__":
    main()
