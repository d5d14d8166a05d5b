"""SIGTERM / SIGINT (issue 24, fault 5; what SLURM and Kubernetes send before a kill, and Ctrl-C): the run
finishes its current step, writes a complete checkpoint, prints one line and exits 143 / 130; resuming
continues exactly. Real signals at random moments of step-3 runs on the demo models (as the kill -9 tests do
for saves), compared with an uninterrupted run: same metrics rows, same final weights."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, TINY_PPO, child_env, read_metrics

FLAGS = TINY_PPO + ["--max_steps", "12", "--save_steps", "3", "--termination", "randomized"]
STOPPED = re.compile(r"^stopped: (SIGTERM|SIGINT) received: finished step (\d+) and saved the complete checkpoint "
                     r"(\S+); continue with --resume \(exit status (\d+)\)$")


def _command(out, resume: bool) -> list:
    return [sys.executable, "-m", "dschat.cli.ppo", *FLAGS, "--output_dir", str(out), *(["--resume"] * resume)]


def _metrics_identity(out):
    """The metrics file's inode once the loop has begun (the step-0 row, or a resume's rewrite), else None."""
    path = os.path.join(out, "metrics.jsonl")
    try:
        return os.stat(path).st_ino if os.path.getsize(path) else None
    except FileNotFoundError:
        return None


def interrupted_run(out, rng: random.Random, signals: int) -> list:
    """Launch, send ``signals`` real signals (SIGTERM and SIGINT in turn) at random moments after the loop began,
    resume after each; returns ``[(signal name, step, exit status)]`` of the interruptions."""
    stops, resume = [], False
    for index in range(signals + 1):
        before = _metrics_identity(out)
        process = subprocess.Popen(_command(out, resume), cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        if index < signals:
            while _metrics_identity(out) in (None, before) and process.poll() is None:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.0))  # inside the loop: the final evaluation and save are not covered
            process.send_signal((signal.SIGTERM, signal.SIGINT)[index % 2])
        stdout, stderr = process.communicate(timeout=900)
        assert "Traceback" not in stderr, stderr[-3000:]
        if process.returncode == 0:
            break
        lines = [line for line in stderr.splitlines() if line.startswith(("stopped:", "error:"))]
        assert len(lines) == 1, stderr[-3000:]
        match = STOPPED.match(lines[0])
        assert match, lines[0]
        name, step, path, status = match.group(1), int(match.group(2)), match.group(3), int(match.group(4))
        assert process.returncode == status == 128 + getattr(signal, name)
        assert path == f"{out}/checkpoints/step{step}" and os.path.exists(os.path.join(path, "complete.json"))
        stops.append((name, step, process.returncode))
        resume = True
    else:
        pytest.fail("the run did not finish")
    return stops


@pytest.mark.slow  # timing-dependent: on idle cores the tiny run can end before the signal (see the README)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_signals_at_random_moments_resume_exactly(tmp_path, seed):
    reference = tmp_path / "reference"
    subprocess.run(_command(reference, False), cwd=ROOT, env=child_env(), check=True, capture_output=True, timeout=900)
    out = tmp_path / "interrupted"
    stops = interrupted_run(out, random.Random(seed), signals=2)
    assert [name for name, _, _ in stops] == ["SIGTERM", "SIGINT"][:len(stops)] and stops, stops
    print(json.dumps({"seed": seed, "stops": stops}))
    assert read_metrics(str(out)) == read_metrics(str(reference))
    for model in ("actor", "critic"):
        got, want = load_file(out / model / "model.safetensors"), load_file(reference / model / "model.safetensors")
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got), model
