#!/usr/bin/env python
"""Time the vectorised macro-action ops (``dschat.rlhf.macro_action``) against two baselines:

- ``released``: the style of the authors' released code (scripts/benchmarks/released_style.py): torch ops across
  the batch inside Python loops over macros and macro steps, a per-token ``.item()`` loop in the n-gram
  selector — the honest yardstick for "how much faster than the paper's code";
- ``py-loop``: the test oracle (tests/macro_oracle.py), per-sample / per-macro / per-token loops on Python
  floats — a correctness reference, far slower than any real implementation.

For each termination rule (fixed n-gram, randomized n-gram, perplexity) on a random ragged batch (left-padded
prompts of different lengths, right-padded responses of different lengths) it times three stages:
segmentation, advantages (σ pooling + macro rewards + macro GAE + broadcast) and losses (token-ratio policy
loss, macro-ratio policy loss, clipped value loss), after checking that all implementations agree. The
implementations run in an order rotated per repetition; printed: median [min, max] milliseconds and the
median [min, max] of the per-repetition ratio baseline / vectorised. Not a test.

    .venv/bin/python scripts/benchmarks/bench_macro_ops.py --batch 64 --tokens 512
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))

import macro_oracle as oracle  # noqa: E402
from repeats import rotated, spread  # noqa: E402
import released_style as released  # noqa: E402
from dschat.rlhf.macro_action import (compute_macro_advantages, ngram_segments, policy_loss,  # noqa: E402
                                      ppl_segments, randomized_ngram_segments, shuffled_length_table, value_loss)

CLIP, VALUE_CLIP = 0.2, 0.2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64, help="batch size B")
    parser.add_argument("--tokens", type=int, default=512, help="log-prob positions T per row")
    parser.add_argument("--ngram", type=int, default=5, help="n of the fixed n-gram rule")
    parser.add_argument("--sigma", default="equal", choices=("equal", "unit", "position"), help="macro value σ")
    parser.add_argument("--reward-agg", default="sum", choices=("sum", "mean"), help="macro reward aggregation")
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions (each runs every implementation)")
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


def timed_rotated(functions: Dict[str, Callable[[], object]], repeats: int, device: torch.device) -> Dict[str, list]:
    """Milliseconds per call of each function over ``repeats`` repetitions, the order of the functions rotated
    by one per repetition (after one untimed warm-up call each)."""
    def synchronise() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    names = list(functions)
    times: Dict[str, List[float]] = {name: [] for name in names}
    for name in names:
        functions[name]()
    for repetition in range(repeats):
        for name in rotated(names, repetition):
            synchronise()
            start = time.perf_counter()
            functions[name]()
            synchronise()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


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
          f"sigma={args.sigma}, reward_agg={args.reward_agg}, device={device}, threads={args.threads}, "
          f"{args.repeats} repetitions, rotated order; median [min, max]")
    header = (f"{'rule':<14}{'stage':<13}{'macros':>7}{'vectorised ms':>24}{'released-style ms':>26}"
              f"{'released / vect.':>24}{'py-loop ms':>28}{'py-loop / vect.':>26}")
    print(header)
    print("-" * len(header))
    for rule_name, (vectorised_rule, oracle_rule) in rules.items():
        segment_ids = vectorised_rule()
        segmentation = oracle_rule()
        assert segment_ids.cpu().tolist() == oracle.segment_ids(cpu["mask"], segmentation), rule_name
        macros = sum(len(lengths) for lengths in segmentation)
        released_rule = None
        if rule_name.startswith("fixed"):
            def released_rule():
                return released.ngram_segment_ids(mask, args.ngram)

            assert torch.equal(released_rule(), segment_ids), rule_name

        def vectorised_advantages():
            return compute_macro_advantages(on_device["values"], on_device["rewards"], segment_ids, mask,
                                            args.sigma, args.reward_agg)

        def released_advantages():
            return released.macro_advantages(on_device["values"], on_device["rewards"], segment_ids, args.sigma,
                                             args.reward_agg)

        def oracle_advantages():
            return oracle.macro_advantages(cpu["values"], cpu["rewards"], cpu["mask"], segmentation, args.sigma,
                                           args.reward_agg)

        advantages, returns, _ = vectorised_advantages()
        expected_advantages, expected_returns = oracle_advantages()
        released_advantages_, released_returns = released_advantages()
        error = max((advantages.cpu().double() - torch.tensor(expected_advantages)).abs().max().item(),
                    (returns.cpu().double() - torch.tensor(expected_returns)).abs().max().item(),
                    (released_advantages_ - advantages).abs().max().item(),
                    (released_returns - returns).abs().max().item())

        def vectorised_losses():
            return (policy_loss(on_device["logprobs"], on_device["old_logprobs"], advantages, mask, CLIP),
                    policy_loss(on_device["logprobs"], on_device["old_logprobs"], advantages, mask, CLIP,
                                segment_ids, "macro"),
                    value_loss(on_device["new_values"], on_device["old_values"], returns, mask, VALUE_CLIP))

        def released_losses():
            return (released.policy_loss(on_device["logprobs"], on_device["old_logprobs"], advantages, segment_ids,
                                         CLIP),
                    released.policy_loss(on_device["logprobs"], on_device["old_logprobs"], advantages, segment_ids,
                                         CLIP, "macro"),
                    released.value_loss(on_device["new_values"], on_device["old_values"], returns, segment_ids,
                                        VALUE_CLIP))

        def oracle_losses():
            return (oracle.policy_loss(cpu["logprobs"], cpu["old_logprobs"], expected_advantages, cpu["mask"],
                                       segmentation, CLIP, "token"),
                    oracle.policy_loss(cpu["logprobs"], cpu["old_logprobs"], expected_advantages, cpu["mask"],
                                       segmentation, CLIP, "macro"),
                    oracle.token_critic_loss(cpu["new_values"], cpu["old_values"], expected_returns, cpu["mask"],
                                             VALUE_CLIP))

        ours = [loss[0].item() if isinstance(loss, tuple) else loss.item() for loss in vectorised_losses()]
        theirs = [loss.item() for loss in released_losses()]
        assert all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(ours, theirs)), (rule_name, ours, theirs)

        stages = {"segmentation": (vectorised_rule, released_rule, oracle_rule),
                  "advantages": (vectorised_advantages, released_advantages, oracle_advantages),
                  "losses": (vectorised_losses, released_losses, oracle_losses)}
        totals = {"vectorised": [0.0] * args.repeats, "released": [0.0] * args.repeats,
                  "py-loop": [0.0] * args.repeats}
        for stage, (vectorised, released_fn, loop) in stages.items():
            functions = {"vectorised": vectorised, "py-loop": loop}
            if released_fn is not None:
                functions["released"] = released_fn
            times = timed_rotated(functions, args.repeats, device)
            for name, values in times.items():
                totals[name] = [a + b for a, b in zip(totals[name], values)]
            if released_fn is None:  # no released-style rule: count its stage at our cost in the totals
                totals["released"] = [a + b for a, b in zip(totals["released"], times["vectorised"])]
            print(_row(rule_name, stage, macros, times))
        print(_row(rule_name, "total", macros, totals) + f"   (max |advantage/return diff| {error:.1e})")


def _row(rule_name: str, stage: str, macros: int, times: Dict[str, List[float]]) -> str:
    fast = times["vectorised"]

    def ratio(name: str) -> str:
        return spread([a / b for a, b in zip(times[name], fast)], 1) + "x" if name in times else "-"

    released_ms = spread(times["released"], 2) if "released" in times else "- (ours)"
    return (f"{rule_name:<14}{stage:<13}{macros:>7}{spread(fast, 2):>24}{released_ms:>26}{ratio('released'):>24}"
            f"{spread(times['py-loop'], 1):>28}{ratio('py-loop'):>26}")


if __name__ == "__main__":
    main()
