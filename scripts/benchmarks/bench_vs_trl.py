#!/usr/bin/env python
"""Seconds per step against TRL, the same work on both sides: ``--algo grpo`` (this project's ``--algo grpo``
vs ``trl.GRPOTrainer``) or ``--algo ppo`` (this project's token-level PPO, ``--algo ppo --ngram 1``, vs TRL's
``PPOTrainer``).

Both sides get the same actor checkpoint (and a frozen copy as reference), the same reward-model checkpoint (the
reward, and for PPO the critic's initialisation), the same prompts (the synthetic validation split, only those
of at most ``--max_prompt_len`` tokens, as token ids with the project's ``[bos] + prompt``), and every setting
that changes the cost of a step pinned to one value: dtype (fp32; TRL's configs default to bf16 autocast),
gradient checkpointing (off; TRL's default is on), prompts and samples per step, rows per forward/backward,
passes over a rollout and optimizer steps per rollout, prompt / completion lengths, temperature, top-k, top-p,
the KL (coefficient, estimator, reference forward), the PPO update (critic, γ, λ, clip ranges, advantage
whitening: TRL's PPO always whitens, so the project's run does too), the optimizer and logging. TRL's PPO
samples with top-k 0 and top-p 1 whatever its config says, so the PPO comparison uses those on both sides.

Before timing anything, each side builds its trainer and reports its settings as resolved from what it built
(``peer_settings.py``); the script prints TRL's version and both sides side by side, and exits non-zero with one
line per differing setting if any differs. Every timed run reports them again and is checked the same way.

TRL runs in its own virtual environment, created on first use (CPU torch first, then the pinned TRL): GRPO in
``.bench-venv`` (``trl==1.16.0``), PPO in ``.bench-venv-ppo`` (``trl==1.12.0``, the last release with
``trl.experimental.ppo``; 1.13 removed it). Each side runs as a worker process that times ``--warmup +
--steps`` steps (process CPU time and wall time per step, one OpenMP thread); repetition r starts the two workers
in an order rotated by r. Printed: per side the median [min, max] of the per-step times over all repetitions,
and the median [min, max] over repetitions of the ratio project / TRL of the repetition's median step times
(paired within a repetition).

    python scripts/benchmarks/bench_vs_trl.py --algo grpo --actor outputs/demo/sft --reward outputs/demo/rm
    python scripts/benchmarks/bench_vs_trl.py --algo ppo --actor outputs/demo/sft --reward outputs/demo/rm
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from repeats import rotated, spread  # noqa: E402
from peer_settings import (GRPO_KEYS, PPO_KEYS, differences, project_settings, settings_table,  # noqa: E402
                           trl_grpo_settings, trl_ppo_settings)

TORCH = "torch==2.13.0"
TRL = {"grpo": ("trl==1.16.0", ".bench-venv"), "ppo": ("trl==1.12.0", ".bench-venv-ppo")}
KEYS = {"grpo": GRPO_KEYS, "ppo": PPO_KEYS}


def ensure_venv(path: str, trl: str) -> str:
    """The python of a venv holding ``trl``, created (CPU torch first, then TRL) if it does not exist."""
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        print(f"creating {path} ({TORCH}, then {trl}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", TORCH], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", trl], check=True)
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


def dtype_of(model) -> str:
    import torch

    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[next(model.parameters()).dtype]


def checkpointing(*models) -> bool:
    """Whether any of ``models`` recomputes activations in its backward pass (``is_activation_checkpointing`` in
    transformers >= 5.2x, ``is_gradient_checkpointing`` before)."""
    return any(bool(getattr(model, "is_activation_checkpointing", getattr(model, "is_gradient_checkpointing", False)))
               for model in models)


def fed_prompts(spec: dict) -> list:
    """The token ids of the prompts the timed run feeds (the first ``(warmup + steps) x prompts``)."""
    return spec["prompt_ids"][:(spec["warmup"] + spec["steps"]) * spec["prompts"]]


def project_flags(spec: dict) -> list:
    """Step-3 flags of the project's side, every cost-relevant one given explicitly."""
    flags = ["--output_dir", tempfile.mkdtemp(prefix="bench_vs_trl_"), "--actor_model_name_or_path", spec["actor"],
             "--critic_model_name_or_path", spec["reward"], "--reward_model_name_or_path", spec["reward"],
             "--algo", spec["algo"], "--num_samples_per_prompt", str(spec["num_generations"]),
             "--per_device_generation_batch_size", str(spec["prompts"]),
             "--per_device_train_batch_size", str(spec["micro_batch"]),
             "--max_prompt_seq_len", str(spec["max_prompt_len"]), "--max_new_tokens", str(spec["max_new_tokens"]),
             "--temperature", str(spec["temperature"]), "--top_k", str(spec["top_k"]), "--top_p", str(spec["top_p"]),
             "--kl_coef", str(spec["beta"]), "--kl_estimator", spec["kl_estimator"],
             "--actor_learning_rate", str(spec["lr"]), "--critic_learning_rate", str(spec["lr"]),
             "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", "0",
             "--adam_beta1", str(spec["adam_betas"][0]), "--adam_beta2", str(spec["adam_betas"][1]),
             "--weight_decay", "0", "--gradient_clipping", str(spec["max_grad_norm"]),
             "--dtype", "fp32", "--ppo_epochs", str(spec["epochs"]), "--log_steps", "1", "--seed", "0"]
    if spec["algo"] == "ppo":
        rows = spec["prompts"] * spec["num_generations"]
        flags += ["--termination", "fixed", "--ngram", "1", "--gamma", str(spec["gamma"]), "--lam", str(spec["lam"]),
                  "--ppo_mini_batch_size", str(rows // spec["mini_batches"]), "--whiten_advantages",
                  "--clip_eps", str(spec["cliprange"]), "--value_clip", str(spec["cliprange_value"])]
    return flags


def worker_project(spec: dict, settings_only: bool) -> dict:
    sys.path.insert(0, ROOT)
    import torch

    from bench_ppo_step import build_trainer
    from dschat.data import PromptCollator
    from dschat.core.distributed import init_distributed
    from dschat.model import load_tokenizer

    init_distributed()
    tokenizer = load_tokenizer(spec["actor"], padding_side="left")
    trainer, args = build_trainer(project_flags(spec), tokenizer)
    engines = trainer.engines
    trained = [engine.module for engine in engines.trained.values()]
    prompts = fed_prompts(spec)
    state = {"param_dtype": dtype_of(trained[0]), "gradient_checkpointing": checkpointing(*trained),
             "reference_model": engines.ref is not None, "prompt_tokens": sum(len(ids) for ids in prompts)}
    settings = project_settings(args, state)
    if settings_only:
        return {"settings": settings}
    collate = PromptCollator.for_tokenizer(tokenizer)
    times, lengths = [], []
    lap = step_timer()
    for step in range(spec["warmup"] + spec["steps"]):
        rows = prompts[step * spec["prompts"]:(step + 1) * spec["prompts"]]
        batch = collate([{"input_ids": torch.tensor(ids), "index": torch.tensor(i)} for i, ids in enumerate(rows)])
        torch.manual_seed(step)
        lap()
        metrics, _ = trainer.step(batch)
        times.append(lap())
        lengths.append(metrics["response/length"])
    return {"settings": settings, "times": times[spec["warmup"]:], "length": statistics.mean(lengths)}


def trl_common(spec: dict) -> dict:
    """The ``TrainingArguments`` both TRL configs take, pinned: fp32 (no bf16 autocast), no recomputation, one
    log per step, the optimizer and schedule of the project's side, nothing saved or reported."""
    return dict(output_dir=tempfile.mkdtemp(prefix="bench_vs_trl_"), use_cpu=True, report_to="none",
                save_strategy="no", bf16=False, fp16=False, gradient_checkpointing=False, logging_steps=1,
                learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0,
                adam_beta1=spec["adam_betas"][0], adam_beta2=spec["adam_betas"][1], weight_decay=0.0,
                max_grad_norm=spec["max_grad_norm"], per_device_train_batch_size=spec["micro_batch"],
                dataloader_num_workers=0, seed=0, disable_tqdm=True)


def trl_grpo_kwargs(spec: dict) -> dict:
    """``trl.GRPOConfig`` keyword arguments of the spec: every cost-relevant field given explicitly."""
    rows = spec["prompts"] * spec["num_generations"]
    accumulation = rows // spec["micro_batch"]
    return dict(trl_common(spec), gradient_accumulation_steps=accumulation, steps_per_generation=accumulation,
                num_generations=spec["num_generations"], num_iterations=spec["epochs"],
                max_completion_length=spec["max_new_tokens"], temperature=spec["temperature"],
                top_k=spec["top_k"], top_p=spec["top_p"], min_p=None, repetition_penalty=1.0, beta=spec["beta"],
                disable_dropout=True, shuffle_dataset=False, log_completions=False,
                max_steps=spec["warmup"] + spec["steps"])


def trl_ppo_kwargs(spec: dict) -> dict:
    """``trl.experimental.ppo.PPOConfig`` keyword arguments of the spec (one sample per prompt)."""
    return dict(trl_common(spec), gradient_accumulation_steps=spec["prompts"] // spec["micro_batch"],
                num_mini_batches=spec["mini_batches"], num_ppo_epochs=spec["epochs"],
                total_episodes=(spec["warmup"] + spec["steps"]) * spec["prompts"],
                local_rollout_forward_batch_size=spec["prompts"], response_length=spec["max_new_tokens"],
                stop_token="eos", temperature=spec["temperature"], kl_coef=spec["beta"],
                kl_estimator=spec["kl_estimator"], gamma=spec["gamma"], lam=spec["lam"],
                cliprange=spec["cliprange"], cliprange_value=spec["cliprange_value"], whiten_rewards=False,
                missing_eos_penalty=None, num_sample_generations=0, sft_model_path=spec["actor"],
                reward_model_path=spec["reward"])


def trl_timer(times: list, lengths: list, length_key: str, observed: dict, trained):
    """A ``TrainerCallback`` that records (cpu s, wall s) between step ends (the first from the start of
    training), the logged completion length, and whether the ``trained()`` models recompute activations once
    training has begun (``Trainer.train`` enables it only then)."""
    from transformers import TrainerCallback

    lap = step_timer()

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            observed["gradient_checkpointing"] = checkpointing(*trained())
            lap()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(lap())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and length_key in logs:
                lengths.append(logs[length_key])

    return Timer()


def prompt_text(tokenizer, ids: list) -> str:
    """A text that the tokenizer, called as GRPOTrainer calls it (special tokens added), encodes back into the
    project's ``ids`` (``[bos] + prompt``): the decoded ids with or without the bos, whichever round-trips (else
    the decoded ids; the "prompt tokens fed" check then reports the difference)."""
    texts = [tokenizer.decode(ids[start:]) for start in (0, 1)]
    return next((text for text in texts if tokenizer(text=text)["input_ids"] == ids), texts[0])


def worker_trl_grpo(spec: dict, settings_only: bool) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(spec["actor"], padding_side="left")
    texts = [prompt_text(tokenizer, ids) for ids in fed_prompts(spec)]
    times, lengths, observed = [], [], {}
    trainer = GRPOTrainer(model=spec["actor"], reward_funcs=spec["reward"], args=GRPOConfig(**trl_grpo_kwargs(spec)),
                          train_dataset=Dataset.from_dict({"prompt": texts}), processing_class=tokenizer)
    trainer.add_callback(trl_timer(times, lengths, "completions/mean_length", observed, lambda: [trainer.model]))
    args = trainer.args
    state = {"actor": spec["actor"], "reward model": spec["reward"],
             "mixed_precision": trainer.accelerator.mixed_precision, "param_dtype": dtype_of(trainer.model),
             # before train(): what Trainer.train will enable; a timed run reports what the model then does
             "gradient_checkpointing": bool(getattr(args, "activation_checkpointing", args.gradient_checkpointing)),
             "reference_model": trainer.ref_model is not None, "prompt_limit": spec["max_prompt_len"],
             "prompt_tokens": sum(len(ids) for ids in tokenizer(text=texts)["input_ids"])}
    if settings_only:
        return {"settings": trl_grpo_settings(args, state)}
    trainer.train()
    return {"settings": trl_grpo_settings(trainer.args, dict(state, **observed)), "times": times[spec["warmup"]:],
            "length": statistics.mean(lengths) if lengths else float("nan")}


def worker_trl_ppo(spec: dict, settings_only: bool) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl.experimental.ppo import ppo_trainer as trl_ppo

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(spec["actor"], padding_side="left")
    prompts = fed_prompts(spec)
    generation, lengths = {}, []
    sample = trl_ppo.batch_generation

    def recorded_generation(model, queries, chunk, pad_token_id, config):
        """TRL's own batch_generation; records the sampling it used and the response lengths (to the first
        eos, inclusive)."""
        query_responses, logits = sample(model, queries, chunk, pad_token_id, config)
        generation.update(temperature=config.temperature, **{"top-k": config.top_k, "top-p": config.top_p})
        responses = query_responses[:, queries.shape[1]:]
        ends = (responses == tokenizer.eos_token_id).int().cumsum(1)
        lengths.append(float(((ends == 0) | ((ends == 1) & (responses == tokenizer.eos_token_id))).sum(1)
                             .float().mean()))
        return query_responses, logits

    trl_ppo.batch_generation = recorded_generation
    times, observed = [], {}
    models = {"model": AutoModelForCausalLM.from_pretrained(spec["actor"]),
              "ref_model": AutoModelForCausalLM.from_pretrained(spec["actor"]),
              "value_model": AutoModelForSequenceClassification.from_pretrained(spec["reward"], num_labels=1),
              "reward_model": AutoModelForSequenceClassification.from_pretrained(spec["reward"], num_labels=1)}
    dataset = Dataset.from_dict({"input_ids": prompts})
    trainer = PPOTrainer(args=PPOConfig(**trl_ppo_kwargs(spec)), processing_class=tokenizer, train_dataset=dataset,
                         eval_dataset=dataset.select(range(spec["prompts"])),
                         callbacks=[trl_timer(times, [], "", observed,
                                              lambda: [models["model"], models["value_model"]])], **models)
    state = {"actor": spec["actor"], "reward model": spec["reward"], "critic": spec["reward"],
             "mixed_precision": trainer.accelerator.mixed_precision, "param_dtype": dtype_of(models["model"]),
             "gradient_checkpointing": checkpointing(models["model"], models["value_model"]),
             "reference_model": trainer.ref_model is not None, "prompt_limit": spec["max_prompt_len"],
             "prompt_tokens": sum(len(ids) for ids in prompts), "eos_token_id": tokenizer.eos_token_id}
    settings = trl_ppo_settings(trainer.args, state)
    if settings_only:
        return {"settings": settings}
    trainer.train()
    # the sampling TRL's generate calls really used replaces the documented constants; the recomputation is
    # what the models did once training began
    settings = trl_ppo_settings(trainer.args, dict(state, generation=generation, **observed))
    return {"settings": settings, "times": times[spec["warmup"]:], "length": statistics.mean(lengths)}


WORKERS = {"project": worker_project, "trl-grpo": worker_trl_grpo, "trl-ppo": worker_trl_ppo}


def trl_version(python: str) -> str:
    return subprocess.run([python, "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True,
                          check=True).stdout.strip()


def run_worker(side: str, python: str, spec: dict, spec_path: str, settings_only: bool) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", DS_ACCELERATOR="cpu")
    if side == "project":
        env["PYTHONPATH"] = ROOT
    else:
        env.pop("PYTHONPATH", None)
    worker = "project" if side == "project" else f"trl-{spec['algo']}"
    command = [python, os.path.abspath(__file__), "--worker", worker, "--spec", spec_path]
    done = subprocess.run(command + (["--settings_only"] if settings_only else []), env=env, capture_output=True,
                          text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        sys.exit(f"error: the {side} worker failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def check_settings(project: dict, trl: dict, keys, when: str) -> None:
    """Exit non-zero, one line per differing setting, unless both sides resolved every setting alike."""
    diffs = differences(project, trl, keys)
    if diffs:
        sys.exit("\n".join(f"error: {when}: setting differs: {line}" for line in diffs))


def prompt_ids(actor: str, max_prompt_len: int) -> list:
    """The synthetic validation prompts as the project tokenises them (``[bos] + prompt``), those of at most
    ``max_prompt_len`` tokens."""
    sys.path.insert(0, ROOT)
    from dschat.data import PromptDataset, load_pairs
    from dschat.model import load_tokenizer

    dataset = PromptDataset([pair.prompt for pair in load_pairs("synthetic", "validation")],
                            load_tokenizer(actor, padding_side="left"), max_prompt_len)
    return [ids for ids, _ in dataset.examples]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=["grpo", "ppo"], default="grpo",
                        help="grpo: vs TRL's GRPOTrainer; ppo: token-level PPO vs TRL's PPOTrainer")
    parser.add_argument("--actor", help="actor checkpoint directory (HF format, with tokenizer)")
    parser.add_argument("--reward", help="reward-model checkpoint directory (sequence classifier); PPO's critic too")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions (each runs both workers)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per worker run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per worker run")
    parser.add_argument("--prompts", type=int, default=None,
                        help="prompts per step (default: 8 for grpo, x K=4 = 32 rows; 32 for ppo, 32 rows)")
    parser.add_argument("--num_generations", type=int, default=None,
                        help="K samples per prompt (default: 4 for grpo; ppo samples each prompt once)")
    parser.add_argument("--micro_batch", type=int, default=16, help="rows per forward/backward")
    parser.add_argument("--epochs", type=int, default=1, help="passes over each rollout")
    parser.add_argument("--mini_batches", type=int, default=1, help="ppo: mini-batches (optimizer steps) per pass")
    parser.add_argument("--max_prompt_len", type=int, default=64, help="prompts longer than this are left out")
    parser.add_argument("--max_new_tokens", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top_k", type=int, default=None,
                        help="default: 50 for grpo; 0 for ppo (TRL's PPOTrainer samples with top-k 0, top-p 1)")
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.05, help="KL coefficient")
    parser.add_argument("--kl_estimator", default=None,
                        help="default: k3 for grpo (TRL's GRPO loss has no other), k1 for ppo (TRL's PPO default)")
    parser.add_argument("--gamma", type=float, default=1.0, help="ppo: GAE γ")
    parser.add_argument("--lam", type=float, default=0.95, help="ppo: GAE λ")
    parser.add_argument("--cliprange", type=float, default=0.2, help="ppo: clip ε of the surrogate")
    parser.add_argument("--cliprange_value", type=float, default=0.2, help="ppo: clip range of the value update")
    parser.add_argument("--lr", type=float, default=2e-4, help="learning rate (actor and critic)")
    parser.add_argument("--venv", default=None, help="TRL's virtual environment (default: per --algo)")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--settings_only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        with open(args.spec) as handle:
            spec = json.load(handle)
        print("RESULT " + json.dumps(WORKERS[args.worker](spec, args.settings_only)), flush=True)
        return
    if not (args.actor and args.reward):
        parser.error("--actor and --reward (trained checkpoint directories) are required")
    for path in (args.actor, args.reward):
        if not os.path.isdir(path):
            parser.error(f"{path}: not a checkpoint directory (train the demo's SFT and RM first, README 'Stages')")
    ppo = args.algo == "ppo"
    num_generations = args.num_generations or (1 if ppo else 4)
    args.prompts = args.prompts or (32 if ppo else 8)
    if ppo and num_generations != 1:
        parser.error("--num_generations: TRL's PPOTrainer samples each prompt once; leave it unset for --algo ppo")
    rows = args.prompts * num_generations
    if rows % args.micro_batch or (ppo and rows % (args.mini_batches * args.micro_batch)):
        parser.error(f"--micro_batch {args.micro_batch} must divide the {rows} rows per step"
                     + (f" / --mini_batches {args.mini_batches}" if ppo else ""))
    trl, default_venv = TRL[args.algo]
    trl_python = ensure_venv(args.venv or os.path.join(ROOT, default_venv), trl)
    spec = {key: getattr(args, key) for key in ("algo", "steps", "warmup", "prompts", "micro_batch", "epochs",
                                                 "mini_batches", "max_prompt_len", "max_new_tokens", "temperature",
                                                 "top_p", "beta", "gamma", "lam", "cliprange", "cliprange_value",
                                                 "lr")}
    spec.update(actor=os.path.abspath(args.actor), reward=os.path.abspath(args.reward),
                num_generations=num_generations, top_k=args.top_k if args.top_k is not None else (0 if ppo else 50),
                kl_estimator=args.kl_estimator or ("k1" if ppo else "k3"), adam_betas=[0.9, 0.95],
                max_grad_norm=0.0 if ppo else 1.0,  # TRL's PPOTrainer never clips gradients
                prompt_ids=prompt_ids(args.actor, args.max_prompt_len))
    needed = (args.warmup + args.steps) * args.prompts
    if needed > len(spec["prompt_ids"]):
        parser.error(f"{needed} prompts needed, {len(spec['prompt_ids'])} fit --max_prompt_len {args.max_prompt_len}")
    spec_path = os.path.join(tempfile.mkdtemp(prefix="bench_vs_trl_"), "spec.json")
    with open(spec_path, "w") as handle:
        json.dump(spec, handle)
    pythons = {"project": sys.executable, "trl": trl_python}
    keys = KEYS[args.algo]
    resolved = {side: run_worker(side, pythons[side], spec, spec_path, True)["settings"] for side in pythons}
    print(f"TRL {trl_version(trl_python)} ({trl_python}); settings as each side resolved them from what it built:")
    print(settings_table(resolved["project"], resolved["trl"], keys), flush=True)
    check_settings(resolved["project"], resolved["trl"], keys, "before timing")
    results = {"project": [], "trl": []}
    for repetition in range(args.repeats):
        for side in rotated(["project", "trl"], repetition):
            result = run_worker(side, pythons[side], spec, spec_path, False)
            results[side].append(result)
            print(f"repetition {repetition + 1}: {side} done", flush=True)
        check_settings(results["project"][-1]["settings"], results["trl"][-1]["settings"], keys,
                       f"timed repetition {repetition + 1}")
    print(f"\n--algo {args.algo}: {args.prompts} prompts x K={num_generations} per step, {args.micro_batch} rows per "
          f"forward/backward, {args.max_new_tokens} new tokens at most, T={args.temperature} top-k {spec['top_k']} "
          f"top-p {args.top_p}; settings equal (above); {args.repeats} repetitions x {args.steps} timed steps "
          f"(+{args.warmup} warm-up), order rotated per repetition; median [min, max]")
    print(f"{'side':<10}{'cpu s/step':>26}{'wall s/step':>26}{'response length':>17}")
    for side in ("project", "trl"):
        runs = results[side]
        cpu = [t[0] for run in runs for t in run["times"]]
        wall = [t[1] for run in runs for t in run["times"]]
        print(f"{side:<10}{spread(cpu):>26}{spread(wall):>26}{statistics.mean(r['length'] for r in runs):>17.1f}")
    for index, label in ((0, "cpu"), (1, "wall")):
        ratios = [statistics.median(t[index] for t in p["times"]) / statistics.median(t[index] for t in q["times"])
                  for p, q in zip(results["project"], results["trl"])]
        print(f"project / TRL per step ({label}): {spread(ratios)}")


if __name__ == "__main__":
    main()
