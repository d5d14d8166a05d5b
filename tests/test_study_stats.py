"""The study's statistics (evaluation.study.stats) against hand computations, and the runner's skip/resume
logic (evaluation.study.runner) with a stand-in for step 3 (no training)."""
import itertools
import os
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from evaluation.study import design, runner
from evaluation.study.report import report_lines
from evaluation.study.stats import (area_under_curve, bootstrap_mean_ci, last_quarter_change, paired_difference,
                                    parity, t_interval)
from evaluation.study.summaries import collect, run_summary


def all_resamples(n):
    """Every resample of n seeds (n^n rows, equally likely): the exact bootstrap distribution."""
    return np.asarray(list(itertools.product(range(n), repeat=n)))


def test_bootstrap_ci_of_the_mean_matches_the_exact_bootstrap_distribution():
    # 27 resample means of (1, 2, 4); sorted: 1, 4/3 (x3), ..., 10/3 (x3), 4. numpy's linear percentile:
    # 2.5% at rank 0.65 -> 1 + 0.65 * (4/3 - 1); 97.5% at rank 25.35 -> 10/3 + 0.35 * (4 - 10/3)
    low, high = bootstrap_mean_ci([1.0, 2.0, 4.0], all_resamples(3))
    assert low == pytest.approx(1 + 0.65 / 3)
    assert high == pytest.approx(10 / 3 + 0.35 * 2 / 3)


def test_paired_difference_is_method_minus_baseline_per_seed():
    result = paired_difference([1.0, 2.0, 3.0], [2.0, 2.0, 5.0], all_resamples(3))
    assert result.diff.mean == pytest.approx(1.0)  # diffs 1, 0, 2
    assert result.ahead == 2
    # resample means of (1, 0, 2): min 0, max 2; linear percentiles at ranks 0.65 and 25.35 (steps of 1/3)
    assert result.diff.low == pytest.approx(0.65 / 3)
    assert result.diff.high == pytest.approx(5 / 3 + 0.35 / 3)
    with pytest.raises(ValueError):
        paired_difference([1.0], [1.0, 2.0])


def test_area_under_curve_is_the_trapezoid_mean_level():
    # 10 * (0 + 1) / 2 + 20 * (1 + 1) / 2 = 25 over a range of 30
    assert area_under_curve([0, 10, 30], [0.0, 1.0, 1.0]) == pytest.approx(25 / 30)
    assert area_under_curve([5], [0.7]) == 0.7


def test_parity_on_the_seed_mean_without_smoothing():
    steps = [0, 10, 20, 30]
    result = parity(steps, [[0, 1, 2, 3], [0, 1, 2, 3]], [[0, 2, 4, 4], [0, 4, 4, 4]], smoothing=0.0)
    # target 3 (baseline final) reached by the baseline at 30, by the method's mean (0, 3, 4, 4) at 10
    assert (result.target, result.baseline_step, result.method_step) == (3, 30, 10)
    assert result.speedup == pytest.approx(3.0)


def test_parity_on_the_smoothed_seed_mean():
    # EMA 0.5, bias-corrected: baseline mean (0, 1, 2, 3) -> 0, 2/3, 1.25/0.875, 2.125/0.9375 = 2.2667 (target);
    # method mean (0, 3, 4, 4) -> 0, 2, 2.75/0.875 = 3.1429: crosses between steps 10 and 20 at
    # 10 + (2.2667 - 2) / (3.1429 - 2) * 10 = 12.333; speed-up 30 / 12.333
    result = parity([0, 10, 20, 30], [[0, 1, 2, 3]], [[0, 3, 4, 4]], smoothing=0.5)
    assert result.target == pytest.approx(2.125 / 0.9375)
    assert result.method_step == pytest.approx(10 + (2.125 / 0.9375 - 2) / (2.75 / 0.875 - 2) * 10)
    assert result.speedup == pytest.approx(30 / result.method_step)


# ---- runner: skip / resume ---------------------------------------------------------------------------------------

FAKE_STEP3 = """
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--output_dir") + 1]
if "--fail" in args:
    sys.exit(3)
if "--hang" in args:
    import time
    time.sleep(600)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "metrics.jsonl"), "a") as f:
    for step in (0, 5):
        f.write(json.dumps({"step": step, "eval/score": 0.1 * step, "eval/gold": 0.01 * step,
                            "eval/response_length": 12.0}) + "\\n")
with open(os.path.join(os.path.dirname(out), "calls.txt"), "a") as f:
    f.write(os.path.basename(out) + "\\n")
"""


@pytest.fixture
def fake_step3(tmp_path, monkeypatch):
    script = tmp_path / "fake_step3.py"
    script.write_text(FAKE_STEP3)
    monkeypatch.setattr(runner, "step_command", lambda stage, flags: [sys.executable, str(script), *flags])
    monkeypatch.setattr(runner, "ensure_models", lambda task, out, model: (tmp_path / "sft", tmp_path / "rm"))
    return tmp_path / "out"


def test_runner_skips_finished_runs_and_retrains_unfinished_ones(fake_step3):
    out = fake_step3
    runs = [runner.Run("short", "ppo", seed) for seed in (1, 2, 3)]
    done = runs[0].directory(out)
    done.mkdir(parents=True)
    (done / runner.MARKER).write_text("{}")
    partial = runs[1].directory(out)  # an interrupted run: output but no marker
    partial.mkdir(parents=True)
    (partial / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval/score": 9.0}) + "\n")
    assert runner.pending(runs, out) == runs[1:]
    runner.run_study(out, runs, "tiny-gemma", jobs=2)
    calls = sorted((out / "short" / "ppo" / "calls.txt").read_text().split())
    assert calls == ["seed2", "seed3"]  # seed 1 skipped
    assert runner.pending(runs, out) == []
    assert "9.0" not in (partial / "metrics.jsonl").read_text()  # retrained from scratch
    marker = json.loads((partial / runner.MARKER).read_text())
    assert (marker["task"], marker["arm"], marker["seed"]) == ("short", "ppo", 2) and marker["wall_s"] >= 0
    summary = run_summary(partial)
    assert summary["steps"] == [0, 5] and summary["rm"] == [0.0, 0.5] and summary["gold"] == [0.0, 0.05]
    runner.run_study(out, runs, "tiny-gemma", jobs=2)  # everything finished: nothing runs again
    assert sorted((out / "short" / "ppo" / "calls.txt").read_text().split()) == calls


def test_every_new_run_row_records_its_machine(fake_step3):
    """The runner writes the machine record (``dschat.core.machine.machine_record``) into each run's marker, and the
    run's row in runs.jsonl carries it; rows without one (made before) stay without."""
    from dschat.core.machine import machine_record

    run = runner.Run("short", "ppo", 1)
    assert runner.train_run(run, fake_step3, fake_step3 / "sft", fake_step3 / "rm") is not None
    assert json.loads((run.directory(fake_step3) / runner.MARKER).read_text())["machine"] == machine_record()
    assert run_summary(run.directory(fake_step3))["machine"] == machine_record()
    (run.directory(fake_step3) / runner.MARKER).write_text(json.dumps({"task": "short", "arm": "ppo", "seed": 1}))
    assert "machine" not in run_summary(run.directory(fake_step3))


def test_a_failed_run_leaves_no_marker(fake_step3):
    run = runner.Run("short", "ppo", 1, extra=("--fail",))
    assert runner.train_run(run, fake_step3, fake_step3 / "sft", fake_step3 / "rm") is None
    assert runner.pending([run], fake_step3) == [run]


def test_the_runner_finds_the_three_training_scripts_and_puts_the_repository_first_on_the_path():
    """The runner starts each step's script by its path from the repository root, with that root first on
    ``PYTHONPATH`` (so the checkout's code is the one trained)."""
    repository = Path(__file__).resolve().parents[1]
    assert [runner.step_command(stage, ["--x"])[1:] for stage in ("sft", "rm", "ppo")] == [
        [str(repository / "training" / folder / "main.py"), "--x"]
        for folder in ("step1_supervised_finetuning", "step2_reward_model_finetuning", "step3_rlhf_finetuning")]
    assert all(Path(runner.step_command(stage, [])[1]).is_file() for stage in ("sft", "rm", "ppo"))
    assert runner.child_env()["PYTHONPATH"].split(os.pathsep)[0] == str(repository)


def test_plan_puts_the_core_arms_first_seed_major_then_whole_arms():
    runs = runner.plan_runs(seeds=2, ablation_seeds=1, tasks=("short", "long", *design.MODEL_SEED_TASKS),
                           ablation_tasks=("long", "short"))
    core = [(r.task, r.arm, r.seed) for r in runs[:14]]
    per_seed = [(task, arm) for task in ("short", "long") for arm in design.CORE_ARMS[task]]
    assert core == [(task, arm, seed) for seed in (1, 2) for task, arm in per_seed]
    assert ("long", "ppo-lam1") in per_seed and ("short", "mappo-entropy") in per_seed
    sweeps = [(r.arm, r.seed) for r in runs[14:24]]  # arm-major, as many seeds as the core arms
    assert sweeps == [(arm, seed) for arm in design.SWEEP_ARMS["long"] for seed in (1, 2)]
    first, second = design.CONFIRMATION_TIERS["long"]
    count = 2 * (len(first) + len(second))
    confirmation = [(r.arm, r.seed) for r in runs[24:24 + count]]  # fresh seeds 3-4, tier by tier, seed-major
    assert confirmation == [(arm, seed) for tier in (first, second) for seed in (3, 4) for arm in tier]
    assert first == ("ppo-lam1", "mappo-lam1") and set(design.MAPPO_LAMBDA_ARMS["long"]) <= set(first + second)
    assert {r.extra for r in runs[24:24 + count]} == {design.CONFIRMATION_FLAGS}
    command = runner.ppo_command(runs[24], "OUT", "SFT", "RM")
    assert [command[i + 1] for i, flag in enumerate(command) if flag == "--eval_steps"] == ["4", "12"]  # last wins
    further = 2 * 2 * 2 * len(design.MODEL_SEED_TASKS)  # 2 pairs x 2 arms x 2 fresh seeds on each further SFT + RM seed
    again = [(r.task, r.arm, r.seed) for r in runs[24 + count:24 + count + further]]  # the pairs on those seeds
    assert again == [(task, arm, seed) for pair in (first, ("ppo", "mappo")) for seed in (3, 4)
                     for task in design.MODEL_SEED_TASKS for arm in pair]
    assert design.MODEL_SEED_PAIRS["long"][0] == first and {r.extra for r in runs[24 + count:24 + count + further]} == {
        design.CONFIRMATION_FLAGS}
    ablations = [(r.task, r.arm) for r in runs[24 + count + further:]]
    assert ablations == [(task, arm) for task in ("long", "short") for arm in design.ABLATION_ARMS]
    assert set(design.LAMBDA_SWEEP + design.N_SWEEP) <= {r.arm for r in runs if r.task == "long"}
    assert set(design.ARMS) == {r.arm for r in runs}  # every arm defined is planned


def test_a_run_past_its_time_limit_is_killed_recorded_and_retried_once(fake_step3):
    run = runner.Run("short", "ppo", 1, extra=("--hang",))
    started = time.time()
    assert runner.train_run(run, fake_step3, fake_step3 / "sft", fake_step3 / "rm", timeout_minutes=0.02) is None
    assert time.time() - started < 20
    records = [json.loads(line) for line in (fake_step3 / "timeouts.jsonl").read_text().splitlines()]
    assert [(r["run"], r["attempt"]) for r in records] == [("short/ppo/seed1", 1), ("short/ppo/seed1", 2)]
    assert runner.pending([run], fake_step3) == [run]


def test_verify_compares_a_fresh_run_with_the_committed_summaries(fake_step3, tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    committed = {"task": "short", "arm": "ppo", "seed": 1, "steps": [0, 5, 10], "rm": [0.0, 0.5, 0.7],
                 "gold": [0.0, 0.05, 0.06], "length": [12.0, 12.0, 12.0]}
    (report / "runs.jsonl").write_text(json.dumps(committed) + "\n")
    assert runner.verify(fake_step3, report, runner.Run("short", "ppo", 1), "tiny-gemma") == []
    assert collect(fake_step3) == []  # the shortened run is not one the report collects
    committed["gold"][1] = 0.051
    (report / "runs.jsonl").write_text(json.dumps(committed) + "\n")
    assert runner.verify(fake_step3, report, runner.Run("short", "ppo", 1), "tiny-gemma") == [
        "step 5 gold: committed 0.051, now 0.05"]


def test_report_tables_from_summaries():
    def summary(arm, seed, rm):
        return {"task": "short", "arm": arm, "seed": seed, "wall_s": 60.0, "cpu_s": 30.0, "commit": "abc",
                "steps": [0, 10], "rm": rm, "gold": [0.0, 0.0], "length": [16.0, 16.0]}

    summaries = [summary("ppo", s, [0.0, 1.0 + s]) for s in (1, 2)] + [summary("mappo", s, [0.0, 2.0]) for s in (1, 2)]
    text = "\n".join(report_lines(summaries))
    # mappo finals 2, 2 (t CI of zero spread); differences to ppo (2, 3): 0, -1 -> mean -0.5, s = 0.7071,
    # t(0.975, 1) = 12.706: half-width 12.706 * 0.7071 / sqrt(2) = 6.353, prediction 12.706 * 0.7071 * sqrt(1.5)
    assert "| mappo | 2 | rm | 2.000 | [2.000, 2.000] | [2.000, 2.000] | [2.000, 2.000] | -0.500 | [-6.853, 5.853] |" in text
    assert "[-11.504, 10.504] | 0/2 |" in text
    assert "Runs by commit: `abc` (4 runs)." in text
    assert "accelerator" not in text  # states only what the data says


def test_t_and_prediction_intervals_by_hand():
    values = [1.0, 2.0, 3.0, 6.0]  # mean 3, s = sqrt(14/3); t(0.975, 3) = 3.182446
    half = 3.182446305284263 * (14 / 3) ** 0.5
    assert t_interval(values) == pytest.approx((3 - half / 2, 3 + half / 2))
    assert t_interval(values, new_seed=True) == pytest.approx((3 - half * 1.25 ** 0.5, 3 + half * 1.25 ** 0.5))
    assert all(np.isnan(t_interval([1.0])))


def test_last_quarter_change_is_the_late_slope_times_the_span():
    steps = [0, 4, 8, 12, 16]
    assert last_quarter_change(steps, [0, 1, 2, 3, 3]) == pytest.approx(0.0)  # flat over steps 12-16
    assert last_quarter_change(steps, [0, 1, 2, 3, 4]) == pytest.approx(1.0)  # slope 1/4 over 4 steps


def test_position_profile_by_hand():
    from evaluation.study.positions import position_profile

    profile = position_profile(" The lamp is great. The price was awful. I found the staff okay.")
    # three sentences, thirds of one: opening +1; "The lamp is great." 1 positive of 4 words; last: no sentiment;
    # whole: 1 positive, 1 negative of 13 words
    assert profile == {"opening": 1.0, "first_third": 0.25, "last_third": 0.0, "gold": 0.0, "gold_first3": 0.0,
                       "gold_first10": 0.0, "sentences": 3.0}
    # four sentences: the first three hold 2 positive of 12 words, the whole 2 of 16
    longer = position_profile(" The lamp is great. The price was great. I found it fine. The staff was here.")
    assert (longer["gold_first3"], longer["gold"], longer["sentences"]) == (2 / 12, 2 / 16, 4.0)
    assert position_profile(" The price was awful, the staff was great and bad.")["opening"] == -1.0


def test_verify_names_a_malformed_run_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        runner.main(["verify", "--verify_run", "long/ppo"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "error: --verify_run long/ppo: expected TASK/ARM/SEED, e.g. long/ppo/1"


def test_skip_reported_leaves_out_the_runs_the_report_holds(tmp_path, capsys):
    """``--skip_reported``: a machine without the study's outputs trains only what ``runs.jsonl`` lacks."""
    report = tmp_path / "report"
    report.mkdir()
    (report / "runs.jsonl").write_text(json.dumps({"task": "long", "arm": "ppo-lam1", "seed": 9}) + "\n")
    flags = ["plan", "--out", str(tmp_path / "out"), "--report_dir", str(report), "--tasks", "long",
             "--confirmation_only", "--arms", "ppo-lam1", "mappo-lam1"]
    runner.main(flags)
    everything = capsys.readouterr().out.splitlines()
    runner.main(flags + ["--skip_reported"])
    assert len(everything) == 16 and "todo  long/ppo-lam1/seed9" in everything
    assert capsys.readouterr().out.splitlines() == [line for line in everything if line != "todo  long/ppo-lam1/seed9"]


@pytest.mark.parametrize("task, seed", [("long", "1234"), ("long-sftrm2", "2"), ("long-sftrm3", "3")])
def test_each_sft_rm_seed_trains_its_own_models_from_that_seed(tmp_path, monkeypatch, task, seed):
    commands = []

    def fake_run(command, log, timeout=None):
        commands.append(command)
        directory = Path(command[command.index("--output_dir") + 1])
        directory.mkdir(parents=True)
        (directory / "config.json").write_text("{}")
        return 0, 0.0, 0.0

    monkeypatch.setattr(runner, "run_logged", fake_run)
    sft, rm = runner.ensure_models(task, tmp_path, "tiny-gemma")
    assert (sft, rm) == (tmp_path / task / "sft", tmp_path / task / "rm")
    assert [c[c.index("--seed") + 1] for c in commands] == [seed, seed]
    assert commands[1][commands[1].index("--model_name_or_path") + 1] == str(sft)  # the RM starts from its SFT
    assert [c[c.index("--data_name") + 1] for c in commands] == ["synthetic-long"] * 2
    assert design.TASKS[task].ppo == design.TASKS["long"].ppo
