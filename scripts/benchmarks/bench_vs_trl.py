#!/usr/bin/env python
"""Seconds per GRPO step: this project (``--algo grpo``) vs TRL's ``GRPOTrainer``, same model, prompts, sampling.

Both sides: the same actor checkpoint (and its frozen copy as reference), the same reward-model checkpoint as
the reward, the synthetic validation prompts, K = ``--num_generations`` samples per prompt, ``--prompts``
prompts per step (one optimizer step per generation batch, gradient accumulation over micro-batches of
``--micro_batch`` completions), temperature / top-k / top-p, ``--max_new_tokens``, β = ``--beta`` (project:
KL in the reward; TRL: KL in the loss — both run the reference forward), fp32 on CPU, one OpenMP thread.

TRL runs in its own virtual environment, created by this script on first use (``--venv``, default
``.bench-venv``, git-ignored): the CPU wheel of torch first, then the pinned ``trl``. Each side runs as a worker
process that times ``--warmup + --steps`` steps (process CPU time and wall time per step); repetition r starts
the two workers in an order rotated by r. Printed: per side the median [min, max] of the per-step times over
all repetitions, and the median [min, max] over repetitions of the ratio project / TRL of the repetition's
median step times (paired within a repetition).

    python scripts/benchmarks/bench_vs_trl.py --algo grpo --actor outputs/demo/sft --reward outputs/demo/rm
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH = "torch==2.13.0"
TRL = "trl==1.16.0"


def spread(values: list, digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def ensure_venv(path: str) -> str:
    """The python of a venv holding TRL, created (CPU torch first, then TRL) if it does not exist."""
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        print(f"creating {path} ({TORCH}, then {TRL}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", TORCH], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", TRL], check=True)
    return python


def step_timer():
    """``lap()`` returns (cpu s, wall s) since the previous lap."""
    last = [time.process_time(), time.perf_counter()]

    def lap():
        now = [time.process_time(), time.perf_counter()]
        elapsed = (now[0] - last[0], now[1] - last[1])
        last[:] = now
        return elapsed

    return lap


def worker_project(spec: dict) -> dict:
    sys.path.insert(0, ROOT)
    import torch

    sys.path.insert(0, os.path.join(ROOT, "scripts", "benchmarks"))
    from bench_ppo_step import build_trainer
    from dschat.utils.data import PromptCollator, PromptDataset
    from dschat.utils.distributed import init_distributed
    from dschat.utils.model import load_tokenizer

    init_distributed()
    tokenizer = load_tokenizer(spec["actor"], padding_side="left")
    flags = ["--output_dir", tempfile.mkdtemp(prefix="bench_vs_trl_"), "--actor_model_name_or_path", spec["actor"],
             "--critic_model_name_or_path", spec["reward"], "--algo", "grpo",
             "--num_samples_per_prompt", str(spec["num_generations"]),
             "--per_device_generation_batch_size", str(spec["prompts"]),
             "--per_device_train_batch_size", str(spec["micro_batch"]),
             "--max_prompt_seq_len", "64", "--max_new_tokens", str(spec["max_new_tokens"]),
             "--temperature", str(spec["temperature"]), "--top_k", str(spec["top_k"]), "--top_p", str(spec["top_p"]),
             "--kl_coef", str(spec["beta"]), "--actor_learning_rate", str(spec["lr"]), "--warmup_steps", "0"]
    trainer, _ = build_trainer(flags, tokenizer)
    dataset = PromptDataset(spec["prompt_texts"], tokenizer, 64)
    collate = PromptCollator.for_tokenizer(tokenizer)
    times, lengths = [], []
    lap = step_timer()
    for step in range(spec["warmup"] + spec["steps"]):
        batch = collate([dataset[i] for i in range(step * spec["prompts"], (step + 1) * spec["prompts"])])
        torch.manual_seed(step)
        lap()
        metrics, _ = trainer.step(batch)
        times.append(lap())
        lengths.append(metrics["response/length"])
    return {"times": times[spec["warmup"]:], "length": statistics.mean(lengths)}


def worker_trl(spec: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    steps = spec["warmup"] + spec["steps"]
    dataset = Dataset.from_dict({"prompt": spec["prompt_texts"][:steps * spec["prompts"]]})
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench_vs_trl_"), use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=10**6, max_steps=steps, learning_rate=spec["lr"], lr_scheduler_type="constant",
        per_device_train_batch_size=spec["micro_batch"],
        gradient_accumulation_steps=spec["num_generations"] * spec["prompts"] // spec["micro_batch"],
        num_generations=spec["num_generations"], max_completion_length=spec["max_new_tokens"],
        temperature=spec["temperature"], top_k=spec["top_k"], top_p=spec["top_p"], beta=spec["beta"],
        num_iterations=1, shuffle_dataset=False, dataloader_num_workers=0, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(spec["actor"], padding_side="left")
    times, lengths = [], []
    lap = step_timer()

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == len(times):
                lap()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(lap())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    trainer = GRPOTrainer(model=spec["actor"], reward_funcs=spec["reward"], args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[Timer()])
    trainer.train()
    return {"times": times[spec["warmup"]:], "length": statistics.mean(lengths) if lengths else float("nan")}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=["grpo"], default="grpo", help="the algorithm compared (TRL's GRPOTrainer)")
    parser.add_argument("--actor", help="actor checkpoint directory (HF format, with tokenizer)")
    parser.add_argument("--reward", help="reward-model checkpoint directory (sequence classifier)")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions (each runs both workers)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per worker run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per worker run")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--num_generations", type=int, default=4, help="K samples per prompt")
    parser.add_argument("--micro_batch", type=int, default=16, help="completions per forward/backward")
    parser.add_argument("--max_new_tokens", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top_k", type=int, default=50)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.05, help="KL coefficient")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--venv", default=os.path.join(ROOT, ".bench-venv"), help="TRL's virtual environment")
    parser.add_argument("--worker", choices=["project", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        with open(args.spec) as handle:
            spec = json.load(handle)
        result = (worker_project if args.worker == "project" else worker_trl)(spec)
        print("RESULT " + json.dumps(result), flush=True)
        return
    if not (args.actor and args.reward):
        parser.error("--actor and --reward (trained checkpoint directories) are required")
    sys.path.insert(0, ROOT)
    from dschat.utils.data import load_pairs

    trl_python = ensure_venv(args.venv)
    prompts = [pair.prompt for pair in load_pairs("synthetic", "validation")]
    spec = {key: getattr(args, key) for key in ("actor", "reward", "steps", "warmup", "prompts", "num_generations",
                                                 "micro_batch", "max_new_tokens", "temperature", "top_k", "top_p",
                                                 "beta", "lr")}
    spec.update(actor=os.path.abspath(args.actor), reward=os.path.abspath(args.reward), prompt_texts=prompts)
    spec_path = os.path.join(tempfile.mkdtemp(prefix="bench_vs_trl_"), "spec.json")
    with open(spec_path, "w") as handle:
        json.dump(spec, handle)
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", DS_ACCELERATOR="cpu",
               PYTHONPATH=ROOT)
    pythons = {"project": sys.executable, "trl": trl_python}
    results = {"project": [], "trl": []}
    for repetition in range(args.repeats):
        order = ["project", "trl"] if repetition % 2 == 0 else ["trl", "project"]
        for side in order:
            run_env = env if side == "project" else {k: v for k, v in env.items() if k != "PYTHONPATH"}
            done = subprocess.run([pythons[side], os.path.abspath(__file__), "--worker", side, "--spec", spec_path],
                                  env=run_env, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode or not lines:
                sys.exit(f"error: the {side} worker failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            results[side].append(json.loads(lines[-1][len("RESULT "):]))
            print(f"repetition {repetition + 1}: {side} done", flush=True)
    print(f"\n--algo {args.algo}: {args.prompts} prompts x K={args.num_generations} per step, micro-batch "
          f"{args.micro_batch}, {args.max_new_tokens} new tokens, T={args.temperature} top-k {args.top_k} top-p "
          f"{args.top_p}, beta {args.beta}; {args.repeats} repetitions x {args.steps} timed steps (+{args.warmup} "
          f"warm-up), order rotated per repetition; median [min, max]")
    print(f"{'side':<10}{'cpu s/step':>26}{'wall s/step':>26}{'completion len':>16}")
    for side in ("project", "trl"):
        runs = results[side]
        cpu = [t[0] for run in runs for t in run["times"]]
        wall = [t[1] for run in runs for t in run["times"]]
        print(f"{side:<10}{spread(cpu):>26}{spread(wall):>26}{statistics.mean(r['length'] for r in runs):>16.1f}")
    for index, label in ((0, "cpu"), (1, "wall")):
        ratios = [statistics.median(t[index] for t in p["times"]) / statistics.median(t[index] for t in q["times"])
                  for p, q in zip(results["project"], results["trl"])]
        print(f"project / TRL per step ({label}): {spread(ratios)}")


if __name__ == "__main__":
    main()
