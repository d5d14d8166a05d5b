"""A checkpoint is one unit (issue 11, faults 2 and 5): all engines, trainer state and RNG under one step tag,
committed last and atomically. kill -9 at random moments of a multi-engine save never leaves a torn checkpoint
that is resumed; a full disk gives one line naming the path, removes the partial step and keeps the previous
checkpoint usable."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

HARNESS = os.path.join(ROOT, "tests", "fixtures", "faults", "checkpoint_harness.py")
ENV = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}


def _harness(*args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, HARNESS, *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def _kill_trials(tmp_path, trials: int, zero_stage: int, seed: int) -> dict:
    result = _harness("kill", str(tmp_path), "--trials", str(trials), "--zero_stage", str(zero_stage),
                      "--seed", str(seed))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert counts["trials"] == trials
    steps = counts["resumed_steps"]
    assert steps == sorted(steps) and steps[-1] > steps[0], steps  # the run made progress across kills
    assert counts["partial_left"] >= trials // 4, counts  # the kills did land inside saves
    return counts


def test_kill_9_during_multi_engine_saves_never_resumes_a_torn_checkpoint(tmp_path):
    """20 SIGKILLs at random moments of a loop saving actor + critic + state; after each, the resumed
    checkpoint is the newest complete one and its actor, critic, trainer state, extra and RNG agree."""
    _kill_trials(tmp_path, trials=20, zero_stage=0, seed=0)


@pytest.mark.slow
def test_kill_9_many_trials_zero3(tmp_path):
    _kill_trials(tmp_path, trials=100, zero_stage=3, seed=1)


def _unshare_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k none /tmp 2>&1"],
                           capture_output=True, text=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_available(), reason="needs user+mount namespaces to mount a small tmpfs")
def test_full_disk_during_save_names_path_removes_partial_and_keeps_previous(tmp_path):
    """A real small filesystem (a 100 KiB tmpfs in a private mount namespace): step 1 fits, step 2 does not."""
    out = tmp_path / "run"
    out.mkdir()
    python = sys.executable
    script = (f"mount -t tmpfs -o size=100k none {out} && "
              f"{python} {HARNESS} save {out} --step 1 2; echo \"rc=$?\"; "
              f"ls {out}/checkpoints; cat {out}/checkpoints/latest; echo; "
              f"{python} {HARNESS} verify {out}")
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, env=ENV, capture_output=True,
                            text=True, timeout=900)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "no space left" in errors[0] and f"{out}/checkpoints/step2.partial" in errors[0], errors
    assert "previous checkpoint" in errors[0] and "step1" in errors[0], errors
    assert "Traceback" not in result.stderr
    stdout = result.stdout.splitlines()
    assert "rc=2" in stdout
    listing = stdout[stdout.index("rc=2") + 1:]
    assert "step1" in listing and not any(name.startswith("step2") for name in listing), listing
    assert "step1" in listing[listing.index("latest") + 1]  # `latest` still names step 1
    assert json.loads(stdout[-1]) == {"step": 1}  # and it resumes, consistent in every part
