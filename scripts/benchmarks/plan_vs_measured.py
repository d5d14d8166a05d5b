#!/usr/bin/env python
"""The memory plan (``dschat.cli.plan``) against the measured peak memory of short real runs on this machine.

What is compared, per run: the run's peak resident set size (``ru_maxrss`` of its process, from ``wait4``) minus
the peak RSS of an idle process that imported every module the run had loaded when it ended (torch, DeepSpeed,
transformers, peft, TensorBoard, the project), against the plan's peak per process at one GPU for the same
flags (model states + the largest phase's activations; on a CPU the "GPU" memory is host memory). Single process
(``WORLD_SIZE=1``), the stages' own entry points, a few optimizer steps, under whatever ``nice`` the caller
gives.

    nice -n 10 python scripts/benchmarks/plan_vs_measured.py --cases tiny smollm2 --out /tmp/plan_runs

With ``--tensor_peak`` each stage also runs a second time under ``torch.profiler`` (``profile_memory``) and the
peak of its live tensor bytes is compared with the plan as well: what ``torch.cuda.max_memory_allocated`` reports
on a GPU, free of what RSS adds (the C allocator's retained blocks, Python objects, loaders' buffers).

The data is a fixture of identical rows (``write_fixture``), so every batch is padded to the length the plan is
given. Each stage of a model is one case; step 2 and 3 cases start from the earlier cases' outputs (RM from the base
model, DPO and PPO from the SFT output, the critic and reward model from the RM output)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from dschat.cli.plan import make_plan

MIB = 2 ** 20
HERE = os.path.dirname(os.path.abspath(__file__))
WORDS = 63
"""Prompt and response words of every fixture row (one token each: bos + 63 + 63 + eos = 128 tokens)."""
MODELS = {"tiny": ("tiny-gemma", 8, 3), "smollm2": ("smollm2-135m-instruct", 4, 2)}
"""Case name -> (model, micro batch, optimizer steps of steps 1-2; step 3 runs 2 iterations)."""


def write_fixture(folder: str) -> dict:
    """Preference rows of one fixed length in the jsonl schema (train and eval files), so every batch is padded
    to exactly the length the plan is given: dynamic padding makes a run's padded length its longest row's."""
    os.makedirs(folder, exist_ok=True)
    row = {"prompt": " good" * WORDS, "chosen": " good" * WORDS, "rejected": " game" * WORDS}
    paths = {}
    for split, count in (("train", 240), ("eval", 8)):
        paths[split] = os.path.join(folder, f"{split}.jsonl")
        with open(paths[split], "w") as file:
            file.writelines(json.dumps(row) + "\n" for _ in range(count))
    return paths


def fixture_lengths(model: str, paths: dict) -> tuple:
    """``(sequence tokens, prompt tokens)`` of the fixture rows under ``model``'s tokenizer, as the stages'
    datasets encode them."""
    from dschat.data import PromptDataset, SFTDataset
    from dschat.data.adapters.jsonl import load_jsonl_pairs
    from dschat.model import load_tokenizer

    tokenizer = load_tokenizer(model)
    pairs = load_jsonl_pairs("train", paths["train"], paths["eval"])[:1]
    sequence = len(SFTDataset(pairs, tokenizer, 10 ** 6)[0]["input_ids"])
    prompt = len(PromptDataset([pairs[0].prompt], tokenizer, 10 ** 6)[0]["input_ids"])
    return sequence, prompt


def cases(model: str, batch: int, steps: int, out: str, paths: dict) -> list:
    """``(name, stage, flags)`` of the chain SFT -> RM -> DPO -> PPO for ``model``."""
    seq, prompt = fixture_lengths(model, paths)
    tag = model.split("-")[0]
    sft, rm = os.path.join(out, f"{tag}-sft"), os.path.join(out, f"{tag}-rm")
    common = ["--data_name", "jsonl", "--data_path", paths["train"], "--eval_data_path", paths["eval"],
              "--data_split", "1,1,1", "--log_steps", "1", "--no_progress_bar", "--seed", "1"]
    supervised = [*common, "--max_seq_len", str(seq), "--per_device_train_batch_size", str(batch),
                  "--per_device_eval_batch_size", str(batch), "--max_steps", str(steps)]
    return [
        (f"{tag} sft", "sft", [*supervised, "--model_name_or_path", model, "--output_dir", sft]),
        (f"{tag} rm", "rm", [*supervised, "--model_name_or_path", model, "--output_dir", rm]),
        (f"{tag} dpo", "dpo", [*supervised, "--model_name_or_path", sft,
                               "--output_dir", os.path.join(out, f"{tag}-dpo")]),
        (f"{tag} ppo", "ppo", [*common, "--actor_model_name_or_path", sft, "--critic_model_name_or_path", rm,
                               "--max_prompt_seq_len", str(prompt), "--max_new_tokens", str(seq - prompt),
                               "--per_device_generation_batch_size", str(batch), "--per_device_train_batch_size",
                               str(batch), "--per_device_eval_batch_size", str(batch), "--max_steps", "2",
                               "--warmup_steps", "0", "--output_dir", os.path.join(out, f"{tag}-ppo")]),
    ]


RUN = """import atexit, json, runpy, sys
atexit.register(lambda: json.dump(sorted(sys.modules), open({modules!r}, "w")))
sys.argv = [{module!r}, *{flags!r}]
runpy.run_module({module!r}, run_name="__main__")
"""
"""A stage run that writes the modules it loaded when it exits (the baseline imports the same)."""
PROFILED = """import atexit, json, runpy, sys
import torch
sys.path.insert(0, {here!r})
from plan_vs_measured import live_tensor_peak
profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
def report():
    profiler.stop()
    json.dump(live_tensor_peak(profiler.events()), open({result!r}, "w"))
atexit.register(report)
profiler.start()
sys.argv = [{module!r}, *{flags!r}]
runpy.run_module({module!r}, run_name="__main__")
"""
"""A stage run under the profiler that writes the peak of its live tensor bytes when it exits."""


def live_tensor_peak(events) -> int:
    """The peak of live CPU tensor bytes over a profiled run: the running sum of every operator's own net
    allocation (``self_cpu_memory_usage``: allocated minus freed inside the operator, children excluded), in the
    order the operators started."""
    live = peak = 0
    for event in sorted(events, key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak
IDLE = """import importlib, json
for name in json.load(open({modules!r})):
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""
"""The idle baseline: import every module the run had loaded, allocate nothing."""


def peak_rss(argv: list, env: dict) -> tuple:
    """``(peak RSS bytes, seconds, exit status)`` of running ``argv`` to its end."""
    start = time.time()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        sys.stderr.write(stderr.decode()[-3000:])
    return usage.ru_maxrss * 1024, time.time() - start, status


def tensor_peak(module: str, flags: list, result: str, env: dict) -> float:
    """The peak of live tensor bytes of the stage ``module`` run with ``flags`` under the profiler (its JSON
    goes to ``result``); NaN when the run failed."""
    code = PROFILED.format(here=HERE, result=result, module=module, flags=flags)
    if peak_rss([sys.executable, "-c", code], env)[2]:
        return float("nan")
    with open(result) as handle:
        return json.load(handle)


def single_process_env() -> dict:
    """The environment of a one-process stage run (what ``deepspeed`` would set for rank 0 of 1)."""
    return dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                MASTER_PORT=os.environ.get("MASTER_PORT", "29611"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["tiny", "smollm2"], choices=["tiny", "smollm2"])
    parser.add_argument("--out", required=True, help="folder for the runs' outputs")
    parser.add_argument("--only", nargs="*", default=None, help="run only these stages (sft rm dpo ppo)")
    parser.add_argument("--tensor_peak", action="store_true",
                        help="also run each stage under torch.profiler and compare the plan with its live tensor peak")
    args = parser.parse_args(argv)
    env = single_process_env()
    paths = write_fixture(os.path.join(args.out, "data"))
    rows = []
    for key in args.cases:
        for name, stage, flags in cases(*MODELS[key], args.out, paths):
            if args.only and stage not in args.only:
                continue
            modules = os.path.join(args.out, f"{name.replace(' ', '-')}.modules.json")
            module = f"dschat.cli.{stage}"
            peak, seconds, status = peak_rss([sys.executable, "-c", RUN.format(modules=modules, module=module,
                                                                                flags=flags)], env)
            if status:
                print(f"{name}: failed (status {status})", flush=True)
                continue
            baseline = peak_rss([sys.executable, "-c", IDLE.format(modules=modules)], env)[0]
            plan = make_plan(None, 1, stage=stage, overrides=tuple(flags))
            measured = peak - baseline
            tensors = float("nan")
            if args.tensor_peak:
                result = os.path.join(args.out, f"{name.replace(' ', '-')}.tensor_peak.json")
                elsewhere = [f"{flag}-profiled" if previous == "--output_dir" else flag
                             for previous, flag in zip(["", *flags], flags)]
                tensors = tensor_peak(module, elsewhere, result, env)
            rows.append((name, baseline, peak, measured, plan.peak, tensors))
            print(f"{name}: baseline {baseline / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB, measured "
                  f"{measured / MIB:.1f} MiB, plan {plan.peak / MIB:.1f} MiB (states {plan.states / MIB:.1f}, "
                  f"phases {', '.join(f'{n} {b / MIB:.1f}' for n, b in plan.phases)}), plan/measured "
                  f"{plan.peak / measured:.2f}, live tensor peak {tensors / MIB:.1f} MiB "
                  f"(plan/tensor peak {plan.peak / tensors:.2f}), {seconds:.0f} s", flush=True)
    print("\n| run | baseline MiB | peak RSS MiB | measured (peak - baseline) MiB | plan MiB | plan / measured "
          "| live tensor peak MiB | plan / tensor peak |")
    print("|---|---|---|---|---|---|---|---|")
    for name, base, peak, measured, planned, tensors in rows:
        print(f"| {name} | {base / MIB:.0f} | {peak / MIB:.0f} | {measured / MIB:.1f} | {planned / MIB:.1f} | "
              f"{planned / measured:.2f} | {tensors / MIB:.1f} | {planned / tensors:.2f} |")


if __name__ == "__main__":
    main()
