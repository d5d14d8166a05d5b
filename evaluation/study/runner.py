"""The PPO vs MA-PPO study: paired runs over seeds on the short and long embedded tasks, two at a time,
resumable, each run with a time limit, then the report (:mod:`evaluation.study.report`).

    python -m evaluation.study run --out outputs/study            # train what is missing (two runs at a time)
    python -m evaluation.study report --out outputs/study --report_dir docs/study
    python -m evaluation.study reruns --out outputs/rerun --report_dir docs/study   # committed runs, another machine
    python -m evaluation.study unseen --out outputs/unseen --report_dir docs/study  # new seeds, another machine
    python -m evaluation.study plan --out outputs/study           # list the runs and which are finished
    python -m evaluation.study verify --out outputs/study-verify  # retrain one run, compare with docs/study

One SFT model and one reward model per task, shared by every seed and arm (trained once, ``--seed`` the task's
``model_seed``: 1234); one PPO run per (task, arm, seed) under ``OUT/TASK/ARM/seedS``. The long task is also
trained from two further SFT + RM seeds (:data:`MODEL_SEED_TASKS`), for two pairs of arms only, so that one
interval covers the SFT and reward model's seed as well as PPO's. The order (:func:`plan_runs`): the core arms
seed-major (both tasks: PPO n = 1 and MA-PPO fixed n = 5 at λ = 0.95, the entropy rule, and on the long task PPO at
λ = 1), so a budget cut leaves balanced pairs; then the sweeps arm-major (token PPO's λ ∈ {0.98, 0.99}, MA-PPO's
n ∈ {3, 10, ∞}) with as many seeds; then the confirmation on fresh seeds (``--seeds`` + 1 ... 2 × ``--seeds``: token
PPO at its best λ of the exploration against MA-PPO at λ = 1, then MA-PPO's other λ, :data:`CONFIRMATION_TIERS`);
then two pairs again on the further SFT + RM seeds (:data:`MODEL_SEED_PAIRS`); then the further ablations
(``--ablation_seeds``: the randomized / parsing / ppl rules, several optimizer steps per rollout).
Every run has a constant learning rate after warmup (so where a curve flattens is the method's doing, not a
schedule's) and the same evaluation sampling noise (``--eval_seed``); log-probs come from the raw logits
(``--logprobs_at_unit_temperature``, the released code's setting). A run is finished when its ``study_run.json``
marker exists (written after step 3 exits cleanly, with its wall and CPU time and the commit); an unfinished run
is trained again from scratch; a run that exceeds ``--run_timeout_minutes`` is killed, marked in
``OUT/timeouts.jsonl`` and retried once. ``OUT/study_meta.json`` records the commit, package versions and command.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from dschat.core.entrypoint import ArgumentParser
from dschat.core.machine import machine_record
from evaluation.study.design import (ABLATION_ARMS, ARMS, CONFIRMATION_FLAGS, CONFIRMATION_TIERS, CORE_ARMS, EVAL_SEED,
                                     MODEL_SEED_PAIRS, MODEL_SEED_TASKS, SWEEP_ARMS, TASKS, VERIFY_RUNS,
                                     confirmation_seeds, model_seed_tasks)
from evaluation.study.report import write_report, write_reruns, write_unseen
from evaluation.study.summaries import run_summary


MARKER = "study_run.json"


ROOT = Path(__file__).resolve().parents[2]


STEP_SCRIPTS = {"sft": "training/step1_supervised_finetuning/main.py",
                "rm": "training/step2_reward_model_finetuning/main.py",
                "ppo": "training/step3_rlhf_finetuning/main.py"}


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
    """Every run in the order it is trained: the core arms seed-major (seed 1 of every task and core arm, then
    seed 2, ...); the sweeps arm-major with as many seeds; the confirmation on fresh seeds, tier by tier,
    seed-major (:data:`CONFIRMATION_TIERS`); the pairs of :data:`MODEL_SEED_PAIRS` on the further SFT + RM seeds
    (those of :data:`MODEL_SEED_TASKS` in ``tasks``), pair by pair, seed-major across them; then the ablations arm-major with
    ``ablation_seeds`` (task by task in ``ablation_tasks`` order): a budget cut leaves whole arms, not thinned
    ones."""
    runs = [Run(task, arm, seed) for seed in range(1, seeds + 1) for task in tasks for arm in CORE_ARMS.get(task, ())]
    runs += [Run(task, arm, seed) for task in tasks for arm in SWEEP_ARMS.get(task, ())
             for seed in range(1, seeds + 1)]
    runs += [Run(task, arm, seed, CONFIRMATION_FLAGS) for task in tasks for tier in CONFIRMATION_TIERS.get(task, ())
             for seed in confirmation_seeds(seeds) for arm in tier]
    runs += [Run(task, arm, seed, CONFIRMATION_FLAGS) for base, pairs in MODEL_SEED_PAIRS.items() for pair in pairs
             for seed in confirmation_seeds(seeds) for task in model_seed_tasks(base) if task in tasks for arm in pair]
    for task in (t for t in ablation_tasks if t in tasks):
        runs += [Run(task, arm, seed) for arm in ABLATION_ARMS for seed in range(1, ablation_seeds + 1)]
    return runs


def is_finished(run_dir: Path) -> bool:
    """A run is finished when the runner wrote its marker (after step 3 exited cleanly)."""
    return (Path(run_dir) / MARKER).is_file()


def pending(runs: Sequence[Run], out: Path) -> List[Run]:
    """The runs still to train (finished ones are skipped)."""
    return [run for run in runs if not is_finished(run.directory(out))]


def reported_runs(report_dir: Path) -> Dict[Tuple[str, str, int], dict]:
    """The summaries in ``report_dir/runs.jsonl`` by ``(task, arm, seed)`` (none when it is missing)."""
    path = Path(report_dir) / "runs.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return {(r["task"], r["arm"], r["seed"]): r for r in map(json.loads, filter(str.strip, lines))}


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


def run_logged(command: Sequence[str], log: Path, timeout: Optional[float] = None
               ) -> Tuple[Optional[int], float, float]:
    """Run ``command`` with its output in ``log``; ``(exit status, wall seconds, CPU seconds)`` (CPU = user +
    system time of that process: what a run costs, whatever else shares the cores). Past ``timeout`` seconds a
    watchdog kills the process group and the status is None."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(log, "w") as handle:
        process = subprocess.Popen(list(command), stdout=handle, stderr=subprocess.STDOUT, env=child_env(), cwd=ROOT,
                                   start_new_session=True)
        watchdog = threading.Timer(timeout, os.killpg, (process.pid, signal.SIGKILL)) if timeout else None
        if watchdog:
            watchdog.start()
        _, status, usage = os.wait4(process.pid, 0)
        timed_out = watchdog is not None and not watchdog.is_alive()
        if watchdog:
            watchdog.cancel()
    code = None if timed_out else os.waitstatus_to_exitcode(status)
    return code, time.time() - start, usage.ru_utime + usage.ru_stime


def ensure_models(task_name: str, out: Path, model: str) -> Tuple[Path, Path]:
    """The task's shared SFT and reward models (trained unless present): ``(sft_dir, rm_dir)``."""
    task = TASKS[task_name]
    sft, rm = Path(out) / task_name / "sft", Path(out) / task_name / "rm"
    for stage, directory, flags in (("sft", sft, ("--model_name_or_path", model, *task.sft)),
                                    ("rm", rm, ("--model_name_or_path", str(sft), *task.rm))):
        if not has_model(directory):
            print(f"== {task_name} {stage} -> {directory}", flush=True)
            status, wall, _ = run_logged(step_command(stage, (*flags, "--output_dir", str(directory), "--seed",
                                                           str(task.model_seed))), directory.with_suffix(".log"))
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


def train_run(run: Run, out: Path, sft: Path, rm: Path, max_steps: Optional[int] = None,
              timeout_minutes: Optional[float] = None, attempts: int = 2) -> Optional[float]:
    """Train one run from scratch and write its marker; its wall seconds, or None if step 3 failed. A run past
    ``timeout_minutes`` is killed, recorded in ``OUT/timeouts.jsonl`` and started again, ``attempts`` in all."""
    directory = run.directory(out)
    command = ppo_command(run, out, sft, rm, max_steps)
    name = f"{run.task}/{run.arm}/seed{run.seed}"
    for attempt in range(1, attempts + 1):
        shutil.rmtree(directory, ignore_errors=True)
        status, wall, cpu = run_logged(command, directory.parent / f"{directory.name}.log",
                                       60 * timeout_minutes if timeout_minutes else None)
        if status is not None:
            break
        with open(Path(out) / "timeouts.jsonl", "a") as handle:
            handle.write(json.dumps({"run": name, "attempt": attempt, "wall_s": round(wall, 1)}) + "\n")
        print(f"!! {name} exceeded {timeout_minutes} min (attempt {attempt} of {attempts}); killed", flush=True)
    if status is None or status:
        print(f"!! {name} failed ({'time limit' if status is None else f'exit {status}'}); see {directory}.log",
              flush=True)
        return None
    marker = {"task": run.task, "arm": run.arm, "seed": run.seed, "wall_s": round(wall, 1),
              "cpu_s": round(cpu, 1), "commit": code_version()["commit"],
              "machine": machine_record(), "flags": command[2:],
              "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - wall))}
    (directory / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    print(f"ok {name} in {wall:.0f} s ({cpu:.0f} CPU s)", flush=True)
    return wall


def code_version() -> dict:
    """The commit of the code the runs use (``+dirty`` when tracked files differ from it) and the versions of
    Python and the packages that change the numbers."""
    from importlib.metadata import PackageNotFoundError, version

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    packages = {}
    for package in ("torch", "transformers", "deepspeed", "tokenizers", "numpy"):
        try:
            packages[package] = version(package)
        except PackageNotFoundError:
            packages[package] = None
    return {"commit": commit, "python": sys.version.split()[0], "packages": packages}


def write_meta(out: Path, argv: Sequence[str]) -> None:
    """``OUT/study_meta.json``: the code version and the command of this invocation (appended per start)."""
    path = Path(out) / "study_meta.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    starts = json.loads(path.read_text())["starts"] if path.is_file() else []
    starts.append({**code_version(), "command": "python -m evaluation.study " + " ".join(argv),
                   "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    path.write_text(json.dumps({"starts": starts}, indent=1) + "\n")


def run_study(out: Path, runs: Sequence[Run], model: str, jobs: int, max_steps: Optional[int] = None,
              deadline: Optional[float] = None, timeout_minutes: Optional[float] = None) -> None:
    """Train the SFT / reward models the runs need (the tasks side by side), then every unfinished run, ``jobs``
    at a time; no new run starts after ``deadline`` (epoch seconds)."""
    tasks = list(dict.fromkeys(run.task for run in runs))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        models = dict(zip(tasks, pool.map(lambda task: ensure_models(task, out, model), tasks)))
    todo = pending(runs, out)
    print(f"{len(runs) - len(todo)} of {len(runs)} runs finished; {len(todo)} to train, {jobs} at a time",
          flush=True)

    def work(run: Run) -> Optional[float]:
        if deadline is not None and time.time() > deadline:
            return None
        return train_run(run, out, *models[run.task], max_steps=max_steps, timeout_minutes=timeout_minutes)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(work, todo))


def verify(out: Path, report_dir: Path, run: Run, model: str) -> List[str]:
    """Retrain ``run`` from scratch at this commit (its task's SFT and reward models too, unless present under
    ``out``) up to its first evaluation after step 0, and compare its evaluations (RM, gold, length) with the
    committed ``report_dir/runs.jsonl``; the lines that differ (empty: the report reproduces). The shortened run
    goes to ``out/verify/TASK/ARM/seedS``, out of the report's reach, so verifying in the study's own ``out``
    (sharing its SFT and reward models) never puts a truncated run in place of a finished one."""
    committed = reported_runs(report_dir)
    key = (run.task, run.arm, run.seed)
    if key not in committed:
        raise RuntimeError(f"{report_dir}/runs.jsonl has no run {run.task}/{run.arm}/seed{run.seed}")
    flags = [*TASKS[run.task].ppo, *run.extra]
    first_eval = int(flags[len(flags) - 1 - flags[::-1].index("--eval_steps") + 1])  # the last one given counts
    sft, rm = ensure_models(run.task, out, model)
    runs = Path(out) / "verify"
    if train_run(run, runs, sft, rm, max_steps=first_eval) is None:
        raise RuntimeError(f"the verification run failed; see {run.directory(runs)}.log")
    fresh, reference = run_summary(run.directory(runs)), committed[key]
    differences = []
    for index, step in enumerate(fresh["steps"]):
        for metric in ("rm", "gold", "length"):
            new, old = fresh[metric][index], reference[metric][reference["steps"].index(step)]
            print(f"step {step:>3} {metric:>6}: committed {old} now {new}", flush=True)
            if new != old:
                differences.append(f"step {step} {metric}: committed {old}, now {new}")
    return differences


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m evaluation.study", description=__doc__)
    parser.add_argument("command", choices=("run", "plan", "report", "reruns", "unseen", "verify"),
                        help="reruns: file OUT's runs of committed (task, arm, seed)s made on another machine kind in "
                             "REPORT_DIR/machine_reruns.jsonl (the machine component), leaving runs.jsonl as it is; "
                             "unseen: file OUT's runs of (task, arm, seed)s runs.jsonl does not hold in "
                             "REPORT_DIR/unseen_seeds.jsonl (checked against the published intervals), likewise")
    parser.add_argument("--out", type=Path, default=Path("outputs/study"), help="where the runs go")
    parser.add_argument("--report_dir", type=Path, default=Path("docs/study"), help="where the report goes")
    parser.add_argument("--seeds", type=int, default=8, help="seeds of the core arms and the sweeps")
    parser.add_argument("--ablation_seeds", type=int, default=4, help="seeds of each further ablation arm")
    parser.add_argument("--tasks", nargs="+", default=["short", "long", *MODEL_SEED_TASKS], choices=sorted(TASKS),
                        help="tasks to train (a further SFT + RM seed of a task is a task of its own)")
    parser.add_argument("--model", default="tiny-gemma",
                        help="base model of the SFT stage (e.g. smollm2-135m-instruct on a GPU)")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at a time")
    parser.add_argument("--max_steps", type=int, default=None, help="override the tasks' PPO steps (smoke runs)")
    parser.add_argument("--budget_minutes", type=float, default=None,
                        help="start no new run after this many minutes (finished runs count; rerun to go on)")
    parser.add_argument("--main_only", action="store_true", help="the core arms only, no sweeps or ablations")
    parser.add_argument("--confirmation_only", action="store_true",
                        help="the confirmation's runs only (fresh seeds, CONFIRMATION_TIERS, and MODEL_SEED_PAIRS on "
                             "the further SFT + RM seeds)")
    parser.add_argument("--arms", nargs="+", default=None, choices=sorted(ARMS), metavar="ARM",
                        help="train only these arms (of the plan, in its order)")
    parser.add_argument("--run_timeout_minutes", type=float, default=30.0,
                        help="a run still going after this is killed, recorded and retried once")
    parser.add_argument("--verify_run", nargs="+", default=list(VERIFY_RUNS), metavar="TASK/ARM/SEED",
                        help="verify: the runs retrained and compared with REPORT_DIR/runs.jsonl")
    parser.add_argument("--skip_reported", action="store_true",
                        help="leave out the runs REPORT_DIR/runs.jsonl already holds (trained on another machine; "
                             "the report keeps them beside the new ones)")
    parser.add_argument("--ablation_tasks", nargs="+", default=["long", "short"], choices=sorted(TASKS),
                        help="tasks the ablation arms run on, in this order")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.ablation_seeds < 0 or args.jobs < 1:
        parser.exit(2, "error: --seeds and --jobs must be >= 1, --ablation_seeds >= 0\n")
    if args.command in ("report", "reruns", "unseen"):
        if not (args.report_dir / "runs.jsonl").is_file() and args.command != "report":
            parser.exit(2, f"error: {args.report_dir}/runs.jsonl: no such file ({args.command} are filed beside its runs)\n")
        try:
            {"report": write_report, "reruns": write_reruns, "unseen": write_unseen}[args.command](args.out,
                                                                                             args.report_dir)
        except ValueError as err:
            parser.exit(2, f"error: --out {args.out}: {err}\n")
        return
    if args.command == "verify":
        planned = {(r.task, r.arm, r.seed): r for r in plan_runs(args.seeds, args.ablation_seeds, args.tasks,
                                                                 args.ablation_tasks)}
        failed = []
        for name in args.verify_run:
            parts = name.split("/")
            if len(parts) != 3 or not parts[2].isdigit():
                parser.exit(2, f"error: --verify_run {name}: expected TASK/ARM/SEED, e.g. long/ppo/1\n")
            try:
                key = (parts[0], parts[1], int(parts[2]))
                differences = verify(args.out, args.report_dir, planned.get(key, Run(*key)), args.model)
            except RuntimeError as err:
                parser.exit(1, f"error: {err}\n")
            if differences:
                failed.append(f"{name}: " + "; ".join(differences))
            else:
                print(f"{name}: the committed evaluations reproduce exactly at {code_version()['commit']}")
        if failed:
            parser.exit(1, f"error: {args.report_dir}/runs.jsonl does not reproduce at this commit: "
                           + " | ".join(failed) + "\n")
        return
    runs = plan_runs(args.seeds, args.ablation_seeds, args.tasks, args.ablation_tasks)
    if args.main_only:
        runs = [run for run in runs if run.arm in CORE_ARMS.get(run.task, ())]
    if args.confirmation_only:
        runs = [run for run in runs if run.seed in confirmation_seeds(args.seeds)
                and (run.task in MODEL_SEED_TASKS or any(run.arm in tier for tier in CONFIRMATION_TIERS.get(run.task, ())))]
    if args.arms:
        runs = [run for run in runs if run.arm in args.arms]
    if args.skip_reported:
        reported = reported_runs(args.report_dir)
        runs = [run for run in runs if (run.task, run.arm, run.seed) not in reported]
    if args.command == "plan":
        for run in runs:
            print(f"{'done' if is_finished(run.directory(args.out)) else 'todo'}  {run.task}/{run.arm}/seed{run.seed}")
        return
    deadline = time.time() + 60 * args.budget_minutes if args.budget_minutes else None
    write_meta(args.out, sys.argv[1:] if argv is None else argv)
    try:
        run_study(args.out, runs, args.model, args.jobs, args.max_steps, deadline, args.run_timeout_minutes)
    except RuntimeError as err:
        parser.exit(1, f"error: {err}\n")
