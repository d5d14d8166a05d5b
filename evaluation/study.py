"""The PPO vs MA-PPO study (issue 16): paired runs over seeds on the short and long embedded tasks, two at a
time, resumable, then the report (:mod:`evaluation.study_report`).

    python -m evaluation.study run --out outputs/study            # train what is missing (two runs at a time)
    python -m evaluation.study report --out outputs/study --report_dir docs/study
    python -m evaluation.study plan --out outputs/study           # list the runs and which are finished

One SFT model and one reward model per task, shared by every seed and arm (trained once, seed 1234); one PPO
run per (task, arm, seed) under ``OUT/TASK/ARM/seedS``. Main comparison first (PPO n = 1 vs MA-PPO fixed n = 5,
both tasks, ``--seeds`` seeds, seed-major so a budget cut leaves balanced pairs), then the ablations on the long
task, then on the short one (``--ablation_seeds`` seeds): the λ = 1 control, n ∈ {3, 10, ∞} (Fig. 6; 5 is the main arm), the other
termination rules (Fig. 5: randomized, parsing, ppl; fixed is the main arm) and several optimizer steps per
rollout (``--ppo_mini_batch_size``); before them, MA-PPO seed 1 per task on the
pre-issue-14 path (``--recompute_rollout_forwards``) beside a rerun on the default path, to price the speed work
in the study's own runs.
A run is finished when its ``study_run.json`` marker exists (written after step 3 exits cleanly, with its wall
and CPU time); an unfinished run directory is trained again from scratch. Every evaluation uses the same
sampling noise (``--eval_seed``). Log-probs come from the raw logits (``--logprobs_at_unit_temperature``,
the released code's setting, in which the study's runs were made).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

MARKER = "study_run.json"
ROOT = Path(__file__).resolve().parents[1]
STEP_SCRIPTS = {"sft": "training/step1_supervised_finetuning/main.py",
                "rm": "training/step2_reward_model_finetuning/main.py",
                "ppo": "training/step3_rlhf_finetuning/main.py"}
EVAL_SEED = 4321
MINI_BATCHES = ("--per_device_train_batch_size", "8", "--ppo_mini_batch_size", "8")
"""The mini-batch arm's update: 8-row optimizer steps (2 per rollout on the long task's 16 rows, 4 on the short
task's 32) instead of one step per rollout."""


@dataclass(frozen=True)
class Task:
    """One embedded task: how its shared SFT and reward models are trained, and its PPO flags."""

    name: str
    sft: Tuple[str, ...]
    rm: Tuple[str, ...]
    ppo: Tuple[str, ...]


COMMON = ("--log_steps", "25", "--no_progress_bar")
PPO_COMMON = ("--logprobs_at_unit_temperature",)
"""Every run's log-probs from the raw logits: the released code's setting, in which the study was run."""
TASKS = {
    # the short task: scripts/demo_flags.sh's flags (the fast demo), eval on 128 prompts with a fixed seed
    "short": Task(
        "synthetic",
        sft=("--data_name", "synthetic", "--num_train_epochs", "6", "--per_device_train_batch_size", "16",
             "--learning_rate", "2e-3", "--warmup_ratio", "0.05", "--max_seq_len", "64", *COMMON),
        rm=("--data_name", "synthetic", "--num_train_epochs", "2", "--per_device_train_batch_size", "16",
            "--learning_rate", "5e-4", "--warmup_ratio", "0.05", "--max_seq_len", "64", *COMMON),
        ppo=("--data_name", "synthetic", "--max_prompt_seq_len", "32", "--max_new_tokens", "24",
             "--per_device_generation_batch_size", "32", "--per_device_train_batch_size", "16",
             "--actor_learning_rate", "2e-4", "--critic_learning_rate", "5e-4", "--warmup_steps", "5",
             "--kl_coef", "0.05", "--max_steps", "60", "--eval_steps", "10", "--max_eval_samples", "128",
             "--per_device_eval_batch_size", "64", "--log_steps", "10", "--log_samples", "0",
             "--no_progress_bar", *PPO_COMMON)),
    # the long task: 100-130-token responses; 40/50/10 split (PPO needs prompts only); sized to fit the study
    # in ~2 hours on 2 CPU cores (~5 min per run)
    "long": Task(
        "synthetic-long",
        sft=("--data_name", "synthetic-long", "--data_split", "4,5,1", "--num_train_epochs", "8",
             "--per_device_train_batch_size", "16", "--learning_rate", "2e-3", "--warmup_ratio", "0.05",
             "--max_seq_len", "160", *COMMON),
        rm=("--data_name", "synthetic-long", "--data_split", "4,5,1", "--num_train_epochs", "3",
            "--per_device_train_batch_size", "16", "--learning_rate", "5e-4", "--warmup_ratio", "0.05",
            "--max_seq_len", "160", *COMMON),
        ppo=("--data_name", "synthetic-long", "--data_split", "4,5,1", "--num_train_epochs", "100",
             "--max_prompt_seq_len", "32", "--max_new_tokens", "136", "--per_device_generation_batch_size", "16",
             "--per_device_train_batch_size", "16", "--actor_learning_rate", "2e-4", "--critic_learning_rate",
             "5e-4", "--warmup_steps", "5", "--kl_coef", "0.05", "--max_steps", "32", "--eval_steps", "4",
             "--max_eval_samples", "128", "--per_device_eval_batch_size", "64", "--log_steps", "4",
             "--log_samples", "0", "--no_progress_bar", *PPO_COMMON)),
}

ARMS: Dict[str, Tuple[str, ...]] = {
    "ppo": ("--termination", "fixed", "--ngram", "1"),
    "mappo": ("--termination", "fixed", "--ngram", "5"),
    "ppo-lam1": ("--termination", "fixed", "--ngram", "1", "--lam", "1.0"),
    "mappo-lam1": ("--termination", "fixed", "--ngram", "5", "--lam", "1.0"),
    "mappo-n3": ("--termination", "fixed", "--ngram", "3"),
    "mappo-n10": ("--termination", "fixed", "--ngram", "10"),
    "mappo-ninf": ("--termination", "fixed", "--ngram", "inf"),
    "mappo-randomized": ("--termination", "randomized"),
    "mappo-parsing": ("--termination", "parsing", "--parser", "spacy"),
    "mappo-ppl": ("--termination", "ppl"),
    "ppo-minibatch": ("--termination", "fixed", "--ngram", "1", *MINI_BATCHES),
    "mappo-minibatch": ("--termination", "fixed", "--ngram", "5", *MINI_BATCHES),
    "mappo-recompute": ("--termination", "fixed", "--ngram", "5", "--recompute_rollout_forwards"),
    "mappo-rerun": ("--termination", "fixed", "--ngram", "5"),
}
"""Arm name -> its step-3 flags (on top of the task's)."""
MAIN_ARMS = ("ppo", "mappo")
ABLATIONS = (("ppo-lam1", "mappo-lam1"), ("mappo-n3", "mappo-n10", "mappo-ninf"),
             ("mappo-randomized", "mappo-parsing", "mappo-ppl"))
MINI_BATCH_ARMS = ("ppo-minibatch", "mappo-minibatch")
SPEED_ARMS = ("mappo-recompute", "mappo-rerun")
"""MA-PPO seed 1 on the path before issue 14's speed work (rollout-time forwards recomputed) and again on the
default path, trained side by side (same load on the cores): same numbers, their costs."""


@dataclass(frozen=True)
class Run:
    task: str
    arm: str
    seed: int
    extra: Tuple[str, ...] = field(default=())

    def directory(self, out: Path) -> Path:
        return Path(out) / self.task / self.arm / f"seed{self.seed}"


def plan_runs(seeds: int, ablation_seeds: int, tasks: Sequence[str] = ("short", "long"),
              ablation_tasks: Sequence[str] = ("long",)) -> List[Run]:
    """Every run in the order it is trained: the main comparison seed-major (seed 1 of every task and arm, then
    seed 2, ...); the speed arm (seed 1 per task); then the ablations arm-major (all seeds of the λ = 1 control,
    then of each n, ...: a budget cut leaves whole arms, not thinned ones), the mini-batch arm first, task by
    task in ``ablation_tasks`` order."""
    runs = [Run(task, arm, seed) for seed in range(1, seeds + 1) for task in tasks for arm in MAIN_ARMS]
    if not ablation_seeds:
        return runs
    runs += [Run(task, arm, 1) for task in tasks for arm in SPEED_ARMS]
    arms = list(MINI_BATCH_ARMS) + [arm for group in ABLATIONS for arm in group]
    for task in (t for t in ablation_tasks if t in tasks):
        runs += [Run(task, arm, seed) for arm in arms for seed in range(1, ablation_seeds + 1)]
    return runs


def is_finished(run_dir: Path) -> bool:
    """A run is finished when the runner wrote its marker (after step 3 exited cleanly)."""
    return (Path(run_dir) / MARKER).is_file()


def pending(runs: Sequence[Run], out: Path) -> List[Run]:
    """The runs still to train (finished ones are skipped)."""
    return [run for run in runs if not is_finished(run.directory(out))]


def has_model(directory: Path) -> bool:
    return (Path(directory) / "config.json").is_file()


def child_env() -> dict:
    """One thread per run (two runs share two cores), the worktree's code first (the accelerator: DeepSpeed's
    choice, CUDA when there is one, unless DS_ACCELERATOR says otherwise)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def step_command(stage: str, flags: Sequence[str]) -> List[str]:
    return [sys.executable, str(ROOT / STEP_SCRIPTS[stage]), *flags]


def run_logged(command: Sequence[str], log: Path) -> Tuple[int, float, float]:
    """Run ``command`` with its output in ``log``; ``(exit status, wall seconds, CPU seconds)`` (CPU = user +
    system time of that process: what a run costs, whatever else shares the cores)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(log, "w") as handle:
        process = subprocess.Popen(list(command), stdout=handle, stderr=subprocess.STDOUT, env=child_env(), cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, time.time() - start, usage.ru_utime + usage.ru_stime


def ensure_models(task_name: str, out: Path, model: str) -> Tuple[Path, Path]:
    """The task's shared SFT and reward models (trained unless present): ``(sft_dir, rm_dir)``."""
    task = TASKS[task_name]
    sft, rm = Path(out) / task_name / "sft", Path(out) / task_name / "rm"
    for stage, directory, flags in (("sft", sft, ("--model_name_or_path", model, *task.sft)),
                                    ("rm", rm, ("--model_name_or_path", str(sft), *task.rm))):
        if not has_model(directory):
            print(f"== {task_name} {stage} -> {directory}", flush=True)
            status, wall, _ = run_logged(step_command(stage, (*flags, "--output_dir", str(directory), "--seed",
                                                           "1234")), directory.with_suffix(".log"))
            if status:
                raise RuntimeError(f"{task_name} {stage} failed (exit {status}); see {directory}.log")
            print(f"   done in {wall:.0f} s", flush=True)
    return sft, rm


def ppo_command(run: Run, out: Path, sft: Path, rm: Path, max_steps: Optional[int] = None) -> List[str]:
    flags = list(TASKS[run.task].ppo)
    if max_steps:
        flags[flags.index("--max_steps") + 1] = str(max_steps)
    return step_command("ppo", ("--actor_model_name_or_path", str(sft), "--critic_model_name_or_path", str(rm),
                                *flags, *ARMS[run.arm], *run.extra, "--seed", str(run.seed), "--eval_seed",
                                str(EVAL_SEED), "--output_dir", str(run.directory(out))))


def train_run(run: Run, out: Path, sft: Path, rm: Path, max_steps: Optional[int] = None) -> Optional[float]:
    """Train one run from scratch and write its marker; its wall seconds, or None if step 3 failed."""
    directory = run.directory(out)
    shutil.rmtree(directory, ignore_errors=True)
    command = ppo_command(run, out, sft, rm, max_steps)
    status, wall, cpu = run_logged(command, directory.parent / f"{directory.name}.log")
    if status:
        print(f"!! {run.task}/{run.arm}/seed{run.seed} failed (exit {status}); see {directory}.log", flush=True)
        return None
    marker = {"task": run.task, "arm": run.arm, "seed": run.seed, "wall_s": round(wall, 1),
              "cpu_s": round(cpu, 1), "flags": command[2:], "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    (directory / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    print(f"ok {run.task}/{run.arm}/seed{run.seed} in {wall:.0f} s ({cpu:.0f} CPU s)", flush=True)
    return wall


def run_study(out: Path, runs: Sequence[Run], model: str, jobs: int, max_steps: Optional[int] = None,
              deadline: Optional[float] = None) -> None:
    """Train the SFT / reward models the runs need, then every unfinished run, ``jobs`` at a time; no new run
    starts after ``deadline`` (epoch seconds)."""
    models = {task: ensure_models(task, out, model) for task in dict.fromkeys(run.task for run in runs)}
    todo = pending(runs, out)
    print(f"{len(runs) - len(todo)} of {len(runs)} runs finished; {len(todo)} to train, {jobs} at a time",
          flush=True)

    def work(run: Run) -> Optional[float]:
        if deadline is not None and time.time() > deadline:
            return None
        return train_run(run, out, *models[run.task], max_steps=max_steps)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(work, todo))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "plan", "report"))
    parser.add_argument("--out", type=Path, default=Path("outputs/study"), help="where the runs go")
    parser.add_argument("--report_dir", type=Path, default=Path("docs/study"), help="where the report goes")
    parser.add_argument("--seeds", type=int, default=8, help="seeds of the main comparison")
    parser.add_argument("--ablation_seeds", type=int, default=5, help="seeds of each ablation arm")
    parser.add_argument("--tasks", nargs="+", default=["short", "long"], choices=sorted(TASKS))
    parser.add_argument("--model", default="tiny-gemma",
                        help="base model of the SFT stage (e.g. smollm2-135m-instruct on a GPU)")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at a time")
    parser.add_argument("--max_steps", type=int, default=None, help="override the tasks' PPO steps (smoke runs)")
    parser.add_argument("--budget_minutes", type=float, default=None,
                        help="start no new run after this many minutes (finished runs count; rerun to go on)")
    parser.add_argument("--main_only", action="store_true", help="the main comparison only, no ablations")
    parser.add_argument("--ablation_tasks", nargs="+", default=["long", "short"], choices=sorted(TASKS),
                        help="tasks the ablation arms run on, in this order")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.ablation_seeds < 0 or args.jobs < 1:
        parser.exit(2, "error: --seeds and --jobs must be >= 1, --ablation_seeds >= 0\n")
    if args.command == "report":
        from evaluation.study_report import write_report

        write_report(args.out, args.report_dir)
        return
    runs = plan_runs(args.seeds, 0 if args.main_only else args.ablation_seeds, args.tasks, args.ablation_tasks)
    if args.command == "plan":
        for run in runs:
            print(f"{'done' if is_finished(run.directory(args.out)) else 'todo'}  {run.task}/{run.arm}/seed{run.seed}")
        return
    deadline = time.time() + 60 * args.budget_minutes if args.budget_minutes else None
    try:
        run_study(args.out, runs, args.model, args.jobs, args.max_steps, deadline)
    except RuntimeError as err:
        parser.exit(1, f"error: {err}\n")


if __name__ == "__main__":
    main()
