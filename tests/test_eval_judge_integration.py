"""End to end, for real: ``transformers serve`` (the OpenAI-compatible server of transformers, installed with
``transformers[serving]``) serves SmolLM2-135M-Instruct on 127.0.0.1 and ``evaluation.judge`` judges a handful of
pairs through the official ``openai`` client.

Opt-in (loads a 135M model; about a minute on 2 CPU cores): ``pytest -m integration
tests/test_eval_judge_integration.py``. A 135M judge's verdicts are close to noise; this checks the pipeline (chat
template, logit_bias, parsing, cache, the answering model's name), not model quality. ``transformers serve``
ignores ``logprobs``: ``--constrain logprobs`` must fail with one line saying so.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from evaluation import judge

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served_model():
    """(base_url, model directory) of a `transformers serve` process pinned to the converted SmolLM2."""
    from dschat.model.smollm2 import convert_smollm2

    model_dir = str(convert_smollm2())
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", model_dir,
                                "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                if process.poll() is not None:
                    pytest.fail("transformers serve exited before it was ready")
                if time.time() > deadline:
                    pytest.fail("transformers serve was not ready after 300 s")
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", model_dir
    finally:
        process.terminate()
        process.wait(timeout=30)


def write_pairs(tmp_path):
    a = tmp_path / "good.jsonl"
    b = tmp_path / "bad.jsonl"
    a.write_text("".join(json.dumps({"prompt": p, "response": good}) + "\n" for p, good, _ in PAIRS))
    b.write_text("".join(json.dumps({"prompt": p, "response": bad}) + "\n" for p, _, bad in PAIRS))
    return str(a), str(b)


def judge_argv(tmp_path, base_url, model_dir, task, constrain):
    a, b = write_pairs(tmp_path)
    return ["--task", task, "--a", a, "--b", b, "--base_url", base_url, "--model", model_dir,
            "--constrain", constrain, "--judge_tokenizer", model_dir, "--concurrency", "2",
            "--cache", str(tmp_path / "cache.jsonl"), "--summary", str(tmp_path / "summary.json"),
            "--output", str(tmp_path / "verdicts.jsonl"), "--no_progress_bar"]


@pytest.mark.integration
@pytest.mark.parametrize("task", ["tldr", "webgpt"])
def test_judge_against_transformers_serve(served_model, tmp_path, capsys, task):
    base_url, model_dir = served_model
    argv = judge_argv(tmp_path, base_url, model_dir, task, "logit_bias")
    judge.main(argv)
    first = capsys.readouterr().out
    print(first)
    # the answering model as the server names it, beside the name asked for
    assert first.startswith(f"judge {model_dir}@main (asked for {model_dir}) on {task}")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pairs"] == len(PAIRS) and summary["model"] == f"{model_dir}@main"
    for counts in summary["criteria"].values():
        assert counts["win"] + counts["tie"] + counts["loss"] == len(PAIRS)  # every verdict parsed
        assert counts["unparseable"] == 0
    judge.main(argv)
    assert "0 API calls" in capsys.readouterr().out  # the second run is served from the cache


@pytest.mark.integration
def test_logprobs_constraint_is_refused_in_one_line(served_model, tmp_path, capsys):
    base_url, model_dir = served_model
    with pytest.raises(SystemExit):
        judge.main(judge_argv(tmp_path, base_url, model_dir, "tldr", "logprobs"))
    err = capsys.readouterr().err
    assert err.startswith("error: --constrain logprobs") and "returned no top_logprobs" in err
