"""The producer's start and end (dschat/rlhf/rollout/producer.py): its start-up has a deadline of its own
(``--rollout_startup_timeout``), apart from the per-rollout ``--rollout_timeout``; a producer whose trainer is
killed says so in one line and exits, its semaphores released (no traceback, no "leaked semaphore" warning)."""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import TINY_PPO, one_line_error, read_metrics
from dschat.cli.ppo import main as ppo_main

FLAGS = TINY_PPO + ["--termination", "fixed", "--ngram", "3", "--eval_steps", "0", "--async_rollout", "1"]


def slow_start(seconds: float, *args) -> None:
    """A producer that takes ``seconds`` longer to start (as on a loaded machine), then runs as usual."""
    from dschat.rlhf.rollout.producer import producer_main

    time.sleep(seconds)
    producer_main(*args)


def start_slowly(monkeypatch, seconds: float) -> None:
    import dschat.rlhf.rollout.producer as producer

    monkeypatch.setattr(producer, "producer_main", functools.partial(slow_start, seconds))


def test_a_healthy_producer_slower_to_start_than_the_rollout_timeout_does_not_stop_the_run(tmp_path, monkeypatch):
    """Start-up 15 s longer than usual, --rollout_timeout 10: the run trains its steps (the per-rollout deadline
    counts from the producer's "ready"; 10 s leaves a loaded machine room to sample the tiny rollouts)."""
    start_slowly(monkeypatch, 15.0)
    ppo_main(FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "2", "--rollout_timeout", "10"])
    assert sum("loss/policy" in row for row in read_metrics(str(tmp_path))) == 2


def test_a_producer_that_does_not_start_in_its_deadline_ends_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    start_slowly(monkeypatch, 60.0)
    begin = time.monotonic()
    message = one_line_error(ppo_main, FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "2",
                                                "--rollout_startup_timeout", "3"], capsys)
    assert "the rollout producer did not start in 3 s (--rollout_startup_timeout)" in message
    assert time.monotonic() - begin < 45


def children(pid: int) -> list:
    """The pids of the processes whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def semaphores() -> set:
    return {name for name in os.listdir("/dev/shm") if name.startswith("sem.mp-")}


@pytest.mark.slow  # a trainer in a child process (~30 s)
def test_a_producer_whose_trainer_is_killed_exits_in_one_line_releasing_its_semaphores(tmp_path):
    """``kill -9`` to the trainer alone, mid-run: its producer ends (stderr closes: it and the resource tracker
    are gone), having written one line and no traceback; the queues' named semaphores the run created are
    unlinked and the resource tracker warns of no leak."""
    from conftest import ROOT, child_env

    before = semaphores()
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "dschat.cli.ppo", *FLAGS, "--output_dir", str(out),
                                "--max_steps", "200"], cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    while process.poll() is None and (not metrics.exists() or metrics.read_text().count("loss/policy") < 2):
        time.sleep(0.05)
    producers = [pid for pid in children(process.pid) if "rollout" in open(f"/proc/{pid}/cmdline").read()
                 or "spawn_main" in open(f"/proc/{pid}/cmdline").read()]
    created = semaphores() - before
    assert producers and created
    os.kill(process.pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    for pid in producers:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()
    lines = [line for line in stderr.splitlines() if "rollout producer" in line]
    assert len(lines) == 1 and f"its trainer (pid {process.pid}) is gone; exiting" in lines[0], stderr[-3000:]
    assert "Traceback" not in stderr and "leaked" not in stderr, stderr[-3000:]
    assert not created & semaphores()
