#!/usr/bin/env python
"""A Gemma-2B-shaped policy with random weights on one GPU (no download: the published 2B dimensions of
``dschat.cli.plan``'s model table, bf16), measured against the memory plan's terms, at the 2B PPO launcher's
micro batch (2 rows of 512 + 512 tokens: ``configs/ppo/gemma-2b.yaml``):

- parameters: ``torch.cuda.memory_allocated`` after loading against the plan's 2 bytes per parameter;
- one training forward + backward: the peak above the parameters (``max_memory_allocated``) against the plan's
  training activations. The peak comes at the start of the backward (the logits' gradients), before the layers'
  parameter gradients exist: plain torch allocates them as the activations are freed, where DeepSpeed holds them
  in buffers the plan counts with the model states;
- rollout generation (sampling, no early stop): the peak above the parameters against the plan's generation
  term (KV cache at full length + prefill), and the rollout tokens per second;
- the time of one actor optimizer step (forward, backward, fused AdamW).

Plain torch + transformers (no DeepSpeed, so no ZeRO and no fp32 master weights: the model-state terms of a
ZeRO run are DeepSpeed's own estimators, checked by ``tests/test_memory_plan.py``). Each timing is the median
[min, max] over ``--repeats`` after one warm-up.

    python scripts/benchmarks/gpu/gemma2b_shape.py [--rows 2] [--prompt_len 512] [--new_tokens 512] [--gen_rows 8]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from dschat.cli.plan import hf_config, model_shape
from dschat.training.memory_plan import generation_activations, training_activations

GIB = 2 ** 30


def timed(fn, repeats: int) -> tuple:
    """``(last result, [seconds per call])`` of ``fn()`` after one warm-up call, synchronised with the GPU."""
    fn()
    seconds = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return result, seconds


def spread(values) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2, help="training micro batch (configs/ppo/gemma-2b.yaml)")
    parser.add_argument("--prompt_len", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=512)
    parser.add_argument("--gen_rows", type=int, default=8, help="prompts generated at once")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = hf_config("gemma-2b")
    shape = model_shape("gemma-2b")
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; Gemma-2B shape {shape.params / 1e9:.3f}B "
          f"parameters, vocab {shape.vocab}, bf16")
    params = torch.cuda.memory_allocated()
    print(f"parameters: measured {params / GIB:.2f} GiB, plan {2 * shape.params / GIB:.2f} GiB")

    seq = args.prompt_len + args.new_tokens
    ids = torch.randint(0, shape.vocab, (args.rows, seq), device="cuda")
    model.train()
    torch.cuda.reset_peak_memory_stats()
    model(input_ids=ids, labels=ids).loss.backward()
    measured = torch.cuda.max_memory_allocated() - params
    planned = training_activations(shape, "bf16", args.rows, seq, checkpointing=False)
    print(f"train {args.rows} x {seq} tokens (activations): measured {measured / GIB:.2f} GiB, "
          f"plan {planned / GIB:.2f} GiB, plan / measured {planned / measured:.2f}")
    model.zero_grad(set_to_none=True)

    model.eval()
    prompts = torch.randint(0, shape.vocab, (args.gen_rows, args.prompt_len), device="cuda")

    def generate():
        with torch.no_grad():
            return model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True, top_k=0,
                                  max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                  pad_token_id=0)

    torch.cuda.reset_peak_memory_stats()
    out, seconds = timed(generate, args.repeats)
    measured = torch.cuda.max_memory_allocated() - params
    planned = generation_activations(shape, "bf16", args.gen_rows, args.prompt_len, args.new_tokens)
    new = out.shape[1] - args.prompt_len
    print(f"generate {args.gen_rows} x ({args.prompt_len} + {new}) tokens: measured {measured / GIB:.2f} GiB, plan "
          f"{planned / GIB:.2f} GiB, plan / measured {planned / measured:.2f}; s per rollout batch {spread(seconds)}, "
          f"rollout tokens/s {statistics.median(args.gen_rows * new / s for s in seconds):.0f}")

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    _, seconds = timed(step, args.repeats)
    print(f"actor step ({args.rows} x {seq} tokens, forward + backward + fused AdamW): s {spread(seconds)}, "
          f"tokens/s {statistics.median(args.rows * seq / s for s in seconds):.0f}; peak allocated "
          f"{torch.cuda.max_memory_allocated() / GIB:.2f} GiB")


if __name__ == "__main__":
    main()
