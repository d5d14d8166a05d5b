"""Checkpoints prove their integrity and their configuration (issue 24, faults 2 and 3): each one's manifest
records every file's size and SHA-256 and the run's resolved configuration; ``--resume`` falls back past a
corrupted checkpoint (one line naming the file), stops when none is intact, refuses a change to an
experiment-defining flag (one line, old -> new) unless ``--allow_config_change``, which logs it in the metrics.
The runs are step 3 on the demo models (24 MB checkpoints)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil

import pytest

from conftest import TINY_PPO, read_metrics
from dschat.stages.configs import STAGE_CONFIGS, RLHFConfig
from dschat.cli.ppo import main as ppo_main
from dschat.training.checkpoint import MANIFEST
from dschat.core.entrypoint import run_cli
from dschat.training.resume_config import CHANGES_KEY, SAFE_TO_CHANGE, config_record, experiment_changes

FLAGS = TINY_PPO + ["--max_steps", "3", "--save_steps", "1", "--termination", "fixed", "--ngram", "5"]
ACTOR_STATES = os.path.join("actor", "mp_rank_00_model_states.pt")
CRITIC_STATES = os.path.join("critic", "mp_rank_00_model_states.pt")


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A finished 3-iteration run with complete checkpoints at steps 1 and 2."""
    out = tmp_path_factory.mktemp("saved") / "run"
    ppo_main(FLAGS + ["--output_dir", str(out)])
    return out


@pytest.fixture
def run_copy(saved_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(saved_run, out)
    return out


def resume(out, capsys, *extra) -> tuple:
    """``(exit status, stdout, warning and error lines of stderr)`` of ``ppo --resume`` through the CLI wrapper
    (stderr also carries transformers' progress bars)."""
    capsys.readouterr()
    try:
        run_cli(lambda: ppo_main(FLAGS + ["--output_dir", str(out), "--resume", *extra]))
        status = 0
    except SystemExit as exit_info:
        status = exit_info.code
    captured = capsys.readouterr()
    return status, captured.out, [line for line in captured.err.splitlines() if line.startswith(("warning:", "error:"))]


def flip_exponent_bit(path) -> None:
    """Flip the top exponent bit of one float32 in the middle of ``path`` (a weight off by ~1e38)."""
    data = bytearray(open(path, "rb").read())
    position = (len(data) // 2) // 4 * 4 + 3
    data[position] ^= 0x40
    open(path, "wb").write(bytes(data))


def truncate_to_half(path) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def train_rows(out) -> dict:
    return {r["step"]: r for r in read_metrics(str(out)) if "loss/policy" in r}


def test_manifest_records_every_file_and_the_configuration(saved_run):
    step = saved_run / "checkpoints" / "step2"
    manifest = json.loads((step / MANIFEST).read_text())
    on_disk = {os.path.relpath(os.path.join(root, name), step) for root, _, names in os.walk(step) for name in names}
    assert set(manifest["files"]) == on_disk - {MANIFEST}
    for relative, record in manifest["files"].items():
        content = (step / relative).read_bytes()
        assert record == {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}, relative
    assert manifest["config"]["ngram"] == 5 and manifest["config"]["termination"] == "fixed"
    assert manifest["config"]["actor_learning_rate"] == 1e-3 and manifest["config"]["output_dir"] == str(saved_run)


def test_flipped_bit_falls_back_to_the_previous_checkpoint_and_continues_exactly(saved_run, run_copy, capsys):
    """One flipped exponent bit in the newest checkpoint's actor states: one line naming the file, resume from
    step 1 (safe flags changed on the way), and steps 2-3 come out as in the uninterrupted run."""
    flip_exponent_bit(run_copy / "checkpoints" / "step2" / ACTOR_STATES)
    status, out, err = resume(run_copy, capsys, "--save_steps", "5", "--log_samples", "1")
    assert status == 0, err
    assert err == [f"warning: checkpoint {run_copy}/checkpoints/step2: {ACTOR_STATES} does not match the SHA-256 in "
                   f"its manifest (the file is corrupted); falling back to the previous complete checkpoint "
                   f"{run_copy}/checkpoints/step1"], err
    assert f"resuming from checkpoint {run_copy}/checkpoints/step1 " in out
    full, resumed = train_rows(saved_run), train_rows(run_copy)
    assert sorted(resumed) == [1, 2, 3]
    for step in (2, 3):
        assert resumed[step] == full[step], step


def test_no_intact_checkpoint_left_stops_with_one_line(run_copy, capsys):
    truncate_to_half(run_copy / "checkpoints" / "step2" / ACTOR_STATES)
    truncate_to_half(run_copy / "checkpoints" / "step1" / CRITIC_STATES)
    status, _, err = resume(run_copy, capsys)
    assert status == 2
    assert len(err) == 2 and err[0].startswith(f"warning: checkpoint {run_copy}/checkpoints/step2: {ACTOR_STATES} has ")
    size = os.path.getsize(run_copy / "checkpoints" / "step1" / CRITIC_STATES)
    assert err[1].startswith(f"error: --resume: checkpoint {run_copy}/checkpoints/step1: {CRITIC_STATES} has {size} "
                             "bytes, its manifest says "), err
    assert err[1].endswith("no earlier complete checkpoint is left in "
                           f"{run_copy}/checkpoints, so there is nothing intact to resume from"), err


def test_changed_experiment_flags_are_refused_in_one_line(run_copy, capsys):
    before = (run_copy / "metrics.jsonl").read_text()
    status, _, err = resume(run_copy, capsys, "--ngram", "3", "--actor_learning_rate", "2e-3")
    assert status == 2 and len(err) == 1, err
    assert err[0] == (f"error: --resume: checkpoint {run_copy}/checkpoints/step2 was saved with a different "
                      "experiment configuration (actor_learning_rate: 0.001 -> 0.002; ngram: 5 -> 3); resume with "
                      "the same flags, or pass --allow_config_change to continue anyway (the changes are then "
                      "logged)")
    assert (run_copy / "metrics.jsonl").read_text() == before


def test_randomized_over_a_fixed_rule_checkpoint_with_override_is_logged_in_the_metrics(run_copy, capsys, caplog):
    """Was ``KeyError: 'termination'``: the randomized rule's generator has no state in a fixed-rule checkpoint;
    with --allow_config_change it starts fresh, and the change is logged and kept in metrics.jsonl."""
    status, _, err = resume(run_copy, capsys, "--termination", "randomized", "--allow_config_change")
    assert status == 0, err
    changes = [r for r in read_metrics(str(run_copy)) if CHANGES_KEY in r]
    assert changes == [{"step": 2, CHANGES_KEY: "termination: fixed -> randomized"}]
    assert sorted(train_rows(run_copy)) == [1, 2, 3]
    assert any("no state for the termination" in r.getMessage() for r in caplog.records)
    manifest = json.loads((run_copy / "checkpoints" / "step2" / MANIFEST).read_text())
    assert manifest["config"]["termination"] == "fixed"  # the checkpoint keeps what it was saved with


def test_safe_to_change_names_real_flags_and_new_flags_are_compared():
    """Every safe name is a flag of some stage; a field added to a config later is compared without being
    listed anywhere."""
    every_flag = {field.name for config in STAGE_CONFIGS.values() for field in dataclasses.fields(config)}
    assert SAFE_TO_CHANGE <= every_flag, SAFE_TO_CHANGE - every_flag

    @dataclasses.dataclass
    class Extended(RLHFConfig):
        brand_new_rule_option: float = 0.5

    saved = config_record(Extended(output_dir="a"))
    current = config_record(Extended(output_dir="b", brand_new_rule_option=0.7, eval_steps=3, gamma=0.9))
    assert experiment_changes(saved, current) == ["brand_new_rule_option: 0.5 -> 0.7", "gamma: 1.0 -> 0.9"]


def test_resume_with_no_checkpoint_says_it_starts_from_step_zero(tmp_path, capsys):
    from conftest import SFT_FLAGS
    from dschat.cli.sft import main as sft_main

    sft_main(SFT_FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "1", "--max_eval_samples", "16",
                          "--max_train_samples", "64", "--resume"])
    out = capsys.readouterr().out
    assert f"--resume: no checkpoint in {tmp_path}/checkpoints; starting from step 0" in out
