#!/usr/bin/env python
"""Milliseconds per decode step of the HF rollout engine's ``generate`` at the Gemma-2B shape (random weights, bf16,
one GPU), with transformers' dynamic KV cache (the default) and with ``--generation_compile`` (a static cache and
transformers' compiled forward), at several prompt counts.

Each configuration generates ``--new_tokens`` sampled tokens (no early stop) and, to separate the prefill, one
token; the decode step is (t(N) - t(1)) / (N - 1). The call is ``model.generate`` with the keyword arguments
``dschat/rlhf/rollout/hf.py`` passes (temperature 0.8, top-k 50, KV cache on; ``cache_implementation="static"``
with the flag). Repetition r runs the configurations in an order rotated by r after one warm-up each (the
compiled one's includes its compilation, reported apart); printed: median [min, max] over repetitions.

    python scripts/benchmarks/gpu/bench_generate.py --rows 8 64 --new_tokens 128 --repeats 3
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from dschat.cli.plan import hf_config


def spread(values) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 64], help="prompts generated at once")
    parser.add_argument("--prompt_len", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(hf_config("gemma-2b"), dtype=torch.bfloat16).eval()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; Gemma-2B shape, bf16, prompt "
          f"{args.prompt_len}, {args.new_tokens} new tokens, temperature 0.8, top-k 50")

    def run(prompts, new: int, compile: bool) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=0.8,
                                 top_k=50, top_p=1.0, max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                                 use_cache=True, **({"cache_implementation": "static"} if compile else {}))
        torch.cuda.synchronize()
        assert out.shape[1] == prompts.shape[1] + new
        return time.perf_counter() - start

    print("| prompts | engine | ms per decode step | prefill s | first call s |")
    print("|---|---|---|---|---|")
    for rows in args.rows:
        prompts = torch.randint(0, model.config.vocab_size, (rows, args.prompt_len), device="cuda")
        modes = {"dynamic cache": False, "static cache + compile": True}
        first = {}
        for name, flag in list(modes.items()):
            try:
                first[name] = run(prompts, args.new_tokens, flag)
            except Exception as error:  # report a configuration that does not run, measure the others
                print(f"| {rows} | {name} | failed: {type(error).__name__}: {str(error).splitlines()[0][:150]} | | |")
                del modes[name]
        for flag in modes.values():
            run(prompts, 1, flag)
        steps = {name: [] for name in modes}
        prefill = {name: [] for name in modes}
        names = list(modes)
        for r in range(args.repeats):
            for name in names[r % 2:] + names[:r % 2]:
                full, one = run(prompts, args.new_tokens, modes[name]), run(prompts, 1, modes[name])
                steps[name].append(1000 * (full - one) / (args.new_tokens - 1))
                prefill[name].append(one)
        for name in names:
            print(f"| {rows} | {name} | {spread(steps[name])} | {spread(prefill[name])} | {first[name]:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
