#!/usr/bin/env python
"""Rollout seconds of the HF and vLLM engines (``--rollout_engine``) on the same model, prompts and sampling, and
of a bare vLLM ``LLM`` beside them (what a plain vLLM script reaches on this machine at the time of the run).

Method: the three sides are built once in this process from the same weights and warmed up: ``hf`` and ``vllm``
are the trainer's engines (vLLM's weights loaded through the engine's own sync, as in training); ``bare`` is
``vllm.LLM`` loaded from a checkpoint directory of the same model with vLLM's own loader and sampler, built
before the engine (none of the engine's changes reach it: no per-row seeds, no sampled-token log-probs, no
log-prob convention, no kept weights). For every shape (prompts x new tokens) repetition r runs the three in an
order ROTATED by r on the same prompts, every response exactly ``new`` tokens long (HF: an eos id that never
occurs; vLLM: ``ignore_eos`` with ``min_tokens``), so all do the same work; the engine also returns each sampled
token's log-prob, as in training; each run is timed with the process's CPU time (user + system, every thread)
and wall time. Printed: the machine (:func:`~dschat.core.machine.machine_line`: CPU model, ISA, threads,
versions; the ratios differ between CPU kinds), then median [min, max] per side and of the per-repetition ratios
(paired within a repetition) HF / engine, HF / bare and engine / bare (the engine's overhead over a bare script).
Pin one thread per process (``OMP_NUM_THREADS=1``; both vLLM sides keep the process's threads) and quote the medians.

    OMP_NUM_THREADS=1 python scripts/benchmarks/bench_rollout.py --model smollm2-135m-instruct --repeats 3
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from repeats import rotated, spread  # noqa: E402

from dschat.rlhf.experience import SamplingConfig  # noqa: E402
from dschat.rlhf.rollout import PlainModel, Rollout  # noqa: E402
from dschat.rlhf.rollout.hf import HFRolloutEngine  # noqa: E402
from dschat.data import PromptCollator, PromptDataset  # noqa: E402
from dschat.data.synthetic_task import generate_pairs  # noqa: E402
from dschat.core.machine import machine_line  # noqa: E402
from dschat.model import load_causal_lm, load_tokenizer  # noqa: E402


def prompts_of(tokenizer, count: int, max_prompt: int):
    texts = [pair.prompt for pair in generate_pairs(count, seed=7)]
    dataset = PromptDataset(texts, tokenizer, max_prompt)
    batch = PromptCollator.for_tokenizer(tokenizer)([dataset[i] for i in range(len(dataset))])
    return batch["input_ids"], batch["attention_mask"]


def timed(engine, prompts, mask, sampling, seed: int) -> tuple:
    torch.manual_seed(seed)
    cpu, wall = time.process_time(), time.perf_counter()
    seq = engine.generate(prompts, mask, sampling).seq
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, seq


class BareVLLM:
    """A plain ``vllm.LLM`` loaded from a checkpoint directory of ``model`` (vLLM's loader, sampler and defaults;
    on CPU eager mode and the in-process engine, as the trainer's engine runs), behind ``generate``."""

    def __init__(self, model, tokenizer, max_model_len: int):
        from dschat.rlhf.rollout.vllm_engine import in_process_environment

        in_process_environment(on_gpu=False)
        from vllm import LLM

        directory = tempfile.mkdtemp(prefix="bench-rollout-")
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        self.llm = LLM(model=directory, dtype="float32", enforce_eager=True, max_model_len=max_model_len,
                       skip_tokenizer_init=True, seed=0)

    def generate(self, prompts, mask, sampling):
        from vllm import SamplingParams

        params = SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k or -1, top_p=sampling.top_p,
                                max_tokens=sampling.max_new_tokens, min_tokens=sampling.max_new_tokens,
                                ignore_eos=True, detokenize=False)
        rows = [{"prompt_token_ids": prompt[keep.bool()].tolist()} for prompt, keep in zip(prompts, mask)]
        outputs = self.llm.generate(rows, params, use_tqdm=False)
        responses = torch.tensor([list(output.outputs[0].token_ids) for output in outputs], dtype=prompts.dtype)
        return Rollout(torch.cat([prompts, responses], dim=1))


def main(argv=None) -> None:
    summary = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(description=summary, allow_abbrev=False,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="policy: a directory or an offline name")
    parser.add_argument("--shapes", nargs="+", default=["8x64", "32x64", "64x128"], help="PROMPTSxNEW_TOKENS")
    parser.add_argument("--repeats", type=int, default=3, help="rotated repetitions per shape")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top_k", type=int, default=50)
    parser.add_argument("--max_prompt", type=int, default=32, help="prompt tokens at most")
    args = parser.parse_args(argv)
    shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes]
    tokenizer = load_tokenizer(args.model, padding_side="left")
    model = load_causal_lm(args.model, tokenizer, "fp32", 0).eval()
    never = len(tokenizer) + 11  # an eos id no row samples: every response is exactly `new` tokens
    from dschat.rlhf.rollout.vllm_engine import VLLMRolloutEngine

    class FixedLength(VLLMRolloutEngine):
        """The vLLM engine with every response exactly ``max_new_tokens`` long."""

        def sampling_params(self, sampling, seeds, want_logprobs):
            from vllm import SamplingParams

            return [SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k or -1, top_p=sampling.top_p,
                                   seed=seed, max_tokens=sampling.max_new_tokens, min_tokens=sampling.max_new_tokens,
                                   ignore_eos=True, detokenize=False, logprobs=0) for seed in seeds]

    max_model_len = args.max_prompt + max(new for _, new in shapes)
    bare = BareVLLM(model, tokenizer, max_model_len)  # first: the engine's changes to vLLM must not reach it
    engines = {"hf": HFRolloutEngine(PlainModel(model), tokenizer.pad_token_id, never),
               "vllm": FixedLength(PlainModel(model), tokenizer, "fp32", max_model_len=max_model_len),
               "bare": bare}
    print(f"model {args.model}, fp32, {torch.get_num_threads()} thread(s), temperature {args.temperature}, "
          f"top-k {args.top_k}, top-p 1.0, every response exactly NEW tokens; {args.repeats} rotated repetitions")
    print(machine_line())
    print("| prompts x new | HF CPU s | engine CPU s | bare vLLM CPU s | HF / engine, CPU | HF / bare, CPU | "
          "engine / bare, CPU | HF / engine, wall |")
    print("|---|---|---|---|---|---|---|---|")
    for count, new in shapes:
        prompts, mask = prompts_of(tokenizer, count, args.max_prompt)
        sampling = SamplingConfig(max_new_tokens=new, temperature=args.temperature, top_k=args.top_k, top_p=1.0)
        for engine in engines.values():  # warm-up (vLLM: first-call kernels and the weight load)
            timed(engine, prompts[:2], mask[:2], sampling, 0)
        cpu = {name: [] for name in engines}
        wall = {name: [] for name in engines}
        names = list(engines)
        for r in range(args.repeats):
            for name in rotated(names, r):
                seconds, elapsed, seq = timed(engines[name], prompts, mask, sampling, 100 + r)
                assert seq.shape[1] == prompts.shape[1] + new
                cpu[name].append(seconds)
                wall[name].append(elapsed)

        def ratio(times, over, under):
            return spread([a / b for a, b in zip(times[over], times[under])])

        print(f"| {count} x {new} | {spread(cpu['hf'])} | {spread(cpu['vllm'])} | {spread(cpu['bare'])} | "
              f"**{ratio(cpu, 'hf', 'vllm')}** | {ratio(cpu, 'hf', 'bare')} | {ratio(cpu, 'vllm', 'bare')} | "
              f"{ratio(wall, 'hf', 'vllm')} |", flush=True)


if __name__ == "__main__":
    main()
