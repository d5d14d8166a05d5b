#!/usr/bin/env python
"""What vLLM's CPU build does with new weights after its first load, path by path, each in a fresh process.

Every path builds the same in-process ``vllm.LLM`` (fp32, eager, from a checkpoint of ``--model``), then ``--syncs``
times perturbs the Hugging Face model (every parameter + 0.01·N(0, 1)) and hands vLLM the new weights under their
Hugging Face names, through ``collective_rpc``:

- ``load``: ``model_runner.model.load_weights`` (vLLM's model loader), plain vLLM;
- ``reload``: ``model_runner.reload_weights(weights_iterator=...)``, plain vLLM, all weights in one call;
- ``reload-split``: the same, one call per Hugging Face module (``q_proj`` apart from ``k_proj``: how ZeRO-3
  gathered groups may fall; vLLM fuses q/k/v and gate/up);
- ``repack`` and ``repack-split``: the rollout engine's path (:mod:`dschat.rlhf.rollout.vllm_engine`): vLLM's CPU
  linear layers keep their plain weight, ``load_weights`` per group, then every layer is packed again.

After the last sync, against the Hugging Face model on the new weights and on the first ones (did the syncs reach
vLLM at all): how many of 6 prompts' greedy tokens equal ``generate``'s, and the largest gap between vLLM's raw
log-prob of each greedy token and the Hugging Face model's log_softmax. Printed per path: those (after the
exception, if one was raised), sync seconds (median [min, max]), resident memory after the build, after the syncs
and its peak during the syncs (``VmHWM`` after resetting it; MiB; the last two include the script's copy of the
first weights, the same for every path).

    OMP_NUM_THREADS=1 python scripts/benchmarks/vllm_weight_paths.py --model smollm2-135m-instruct --syncs 10
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from repeats import spread  # noqa: E402

PATHS = ("load", "reload", "reload-split", "repack", "repack-split")
NEW_TOKENS = 8


def memory_mib(field: str) -> float:
    """``/proc/self/status``'s ``field`` (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> None:
    """Reset ``VmHWM`` to the current resident size (Linux ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def module_groups(model) -> list:
    """``[(name, tensor)]`` per module that holds parameters directly: the finest grouping ZeRO-3's gather makes."""
    groups = []
    for name, module in model.named_modules():
        params = [(f"{name}.{key}" if name else key, p.data) for key, p in module.named_parameters(recurse=False)]
        if params:
            groups.append(params)
    return groups


def tied_once(groups: list) -> list:
    """``groups`` without the parameters already exported under another name (a tied head)."""
    seen, out = set(), []
    for group in groups:
        kept = [(name, tensor) for name, tensor in group if id(tensor.untyped_storage()) not in seen]
        seen.update(id(tensor.untyped_storage()) for _, tensor in kept)
        if kept:
            out.append(kept)
    return out


def run_path(path: str, model_name: str, syncs: int) -> dict:
    """One path in this process (``--child``): the record printed as one JSON line."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    from dschat.data.synthetic_task import generate_pairs
    from dschat.model import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(model_name, padding_side="left")
    model = load_causal_lm(model_name, tokenizer, "fp32", 0).eval()
    directory = tempfile.mkdtemp(prefix="vllm-weight-paths-")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    if path.startswith("repack"):
        from dschat.rlhf.rollout.vllm_engine import _keep_cpu_weights

        _keep_cpu_weights()
    from vllm import LLM, SamplingParams

    llm = LLM(model=directory, dtype="float32", enforce_eager=True, max_model_len=128, skip_tokenizer_init=True,
              seed=0, logprobs_mode="raw_logprobs")
    record = {"path": path, "rss_built": memory_mib("VmRSS")}
    first = copy.deepcopy(model)
    groups = tied_once(module_groups(model))
    if not path.endswith("split"):
        groups = [[pair for group in groups for pair in group]]
    generator = torch.Generator().manual_seed(0)
    seconds = []
    reset_peak()
    try:
        for _ in range(syncs):
            with torch.no_grad():
                for param in model.parameters():
                    param.add_(torch.randn(param.shape, generator=generator) * 0.01)
            start = time.perf_counter()
            for group in groups:
                if path.startswith("reload"):
                    llm.collective_rpc(lambda worker, g=group: worker.model_runner.reload_weights(
                        weights_iterator=iter(g)))
                else:
                    llm.collective_rpc(lambda worker, g=group: worker.model_runner.model.load_weights(iter(g)))
            if path.startswith("repack"):
                from dschat.rlhf.rollout.vllm_engine import _repack

                llm.collective_rpc(_repack)
            seconds.append(time.perf_counter() - start)
    except Exception as error:  # the outcome this script reports
        record["error"] = f"{type(error).__name__}: {error}"[:200]
    record.update(rss_after=memory_mib("VmRSS"), rss_peak=memory_mib("VmHWM"), seconds=seconds)
    prompts = [tokenizer(pair.prompt)["input_ids"][:32] for pair in generate_pairs(6, seed=1)]
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                           SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, logprobs=0, ignore_eos=True,
                                          detokenize=False), use_tqdm=False)
    equal = {"new": 0, "first": 0}
    gaps: dict = {"new": [], "first": []}
    with torch.no_grad():
        for prompt, output in zip(prompts, outputs):
            completion = output.outputs[0]
            ids = torch.tensor([prompt])
            seq = torch.tensor([prompt + list(completion.token_ids)])
            theirs = torch.tensor([step[token].logprob for step, token in zip(completion.logprobs,
                                                                                completion.token_ids)])
            for key, reference in (("new", model), ("first", first)):
                hf = reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                        pad_token_id=tokenizer.pad_token_id)[0, len(prompt):]
                equal[key] += hf.tolist() == list(completion.token_ids)
                logprobs = reference(seq).logits[0, len(prompt) - 1:-1].float().log_softmax(-1)
                gaps[key].append((logprobs.gather(1, seq[0, len(prompt):, None]).flatten() - theirs).abs())
    record.update(rows=len(prompts), **{f"greedy_equal_{key}": count for key, count in equal.items()},
                  **{f"logprob_gap_{key}": float(torch.cat(values).max()) for key, values in gaps.items()})  # NaN stays
    return record


def row(record: dict) -> str:
    rows = record["rows"]
    tokens = "; ".join(f"{key} weights: greedy tokens equal in {record[f'greedy_equal_{key}']}/{rows} rows, log-prob "
                       f"gap {record[f'logprob_gap_{key}']:.1e}" for key in ("new", "first"))
    outcome = f"{record['error']}; then {tokens}" if "error" in record else tokens
    seconds = spread(record["seconds"]) if record["seconds"] else "-"
    return (f"| {record['path']} | {outcome} | {seconds} | {record['rss_built']:.0f} | {record['rss_after']:.0f} | "
            f"{record['rss_peak']:.0f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a directory or an offline name")
    parser.add_argument("--syncs", type=int, default=10, help="weight updates per path")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RECORD " + json.dumps(run_path(args.child, args.model, args.syncs)), flush=True)
        return
    from dschat.core.machine import machine_line

    print(f"model {args.model}, fp32, {args.syncs} syncs per path, each path in a fresh process; {machine_line()}")
    print("| path | vLLM after the last sync against HF on the new / the first weights | sync s | RSS built, MiB | "
          "RSS after, MiB | peak RSS while syncing, MiB |")
    print("|---|---|---|---|---|---|")
    for path in args.paths:
        result = subprocess.run([sys.executable, os.path.abspath(__file__), "--model", args.model, "--syncs",
                                 str(args.syncs), "--child", path], capture_output=True, text=True)
        lines = [line for line in result.stdout.splitlines() if line.startswith("RECORD ")]
        if not lines:
            print(f"| {path} | the process failed (exit {result.returncode}): "
                  f"{result.stderr.strip().splitlines()[-1:]} | | | | |", flush=True)
            continue
        print(row(json.loads(lines[-1][len("RECORD "):])), flush=True)


if __name__ == "__main__":
    main()
