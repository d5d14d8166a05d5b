"""End to end, for real: ``evaluation.local_server`` serves SmolLM2-135M-Instruct on 127.0.0.1 and
``evaluation.judge`` judges a handful of pairs through the official ``openai`` client.

Opt-in (loads a 135M model, ~1 minute on 2 CPU cores): ``pytest -m integration tests/test_eval_judge_integration.py``.
A 135M judge's verdicts are close to noise; this checks the pipeline (chat template, logit_bias, logprobs,
parsing, cache), not model quality.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from evaluation import judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PAIRS = [
    ("My cat stopped eating her dry food after we moved to a new flat. The vet found nothing wrong. What can I do?",
     "Cat stopped eating dry food after a move; vet says she is healthy; looking for advice.",
     "cat food cat food cat"),
    ("I got a job offer with higher pay but a long commute. My current job is close but boring. Should I switch?",
     "Choosing between a better-paid job with a long commute and a nearby but boring job.",
     "job"),
    ("My roommate never cleans the kitchen and I end up doing it every week. How do I bring it up?",
     "Roommate never cleans the kitchen; asking how to raise it without a fight.",
     "kitchen kitchen kitchen kitchen"),
    ("I want to start running but get bored after ten minutes. Any tips to keep going?",
     "Wants to start running but gets bored quickly; asking for tips.",
     "running is a sport"),
]


@pytest.fixture(scope="module")
def server_url():
    process = subprocess.Popen([sys.executable, "-m", "evaluation.local_server", "--port", "0"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.time() + 300
        line = ""
        while time.time() < deadline and "serving" not in line:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                pytest.fail("evaluation.local_server exited before it was ready")
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        process.terminate()
        process.wait(timeout=30)


def write_pairs(tmp_path):
    a = tmp_path / "good.jsonl"
    b = tmp_path / "bad.jsonl"
    a.write_text("".join(json.dumps({"prompt": p, "response": good}) + "\n" for p, good, _ in PAIRS))
    b.write_text("".join(json.dumps({"prompt": p, "response": bad}) + "\n" for p, _, bad in PAIRS))
    return str(a), str(b)


@pytest.mark.integration
@pytest.mark.parametrize("task, constrain", [("tldr", "logit_bias"), ("webgpt", "logprobs")])
def test_judge_against_local_smollm2_server(server_url, tmp_path, capsys, task, constrain):
    a, b = write_pairs(tmp_path)
    argv = ["--task", task, "--a", a, "--b", b, "--base_url", server_url, "--model", "smollm2",
            "--constrain", constrain, "--concurrency", "2", "--cache", str(tmp_path / "cache.jsonl"),
            "--summary", str(tmp_path / "summary.json"), "--output", str(tmp_path / "verdicts.jsonl"),
            "--no_progress_bar"]
    if constrain == "logit_bias":
        argv += ["--judge_tokenizer", "smollm2-135m-instruct"]
    judge.main(argv)
    first = capsys.readouterr().out
    print(first)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pairs"] == len(PAIRS)
    for counts in summary["criteria"].values():
        assert counts["win"] + counts["tie"] + counts["loss"] == len(PAIRS)  # every verdict parsed
        assert counts["unparseable"] == 0
    judge.main(argv)
    assert "0 API calls" in capsys.readouterr().out  # the second run is served from the cache
