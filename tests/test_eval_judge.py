"""LLM judge (paper Fig. 4 / Appendix F.1): answer parsing for the three prompt styles, order randomisation and
its undoing, ties, retries, the on-disk cache and the constrained modes, all with a fake OpenAI client."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from conftest import one_line_error
from evaluation import judge, judge_client, judge_parse, judge_requests, judge_scoring
from evaluation.judge_prompts import TASKS, get_task, render, render_single_char

WEBGPT_CRITERIA = TASKS["webgpt"].criteria


# ------------------------------------------------------------------------------------------ fake client
def fake_response(text: str, top_logprobs=None, model="judge-2024-05-13"):
    logprobs = None
    if top_logprobs is not None:
        entries = [SimpleNamespace(token=t, logprob=lp) for t, lp in top_logprobs]
        logprobs = SimpleNamespace(content=[SimpleNamespace(token=top_logprobs[0][0], logprob=top_logprobs[0][1],
                                                            top_logprobs=entries)])
    message = SimpleNamespace(content=text, role="assistant")
    return SimpleNamespace(model=model,
                           choices=[SimpleNamespace(message=message, logprobs=logprobs, finish_reason="stop")])


class FakeClient:
    """``client.chat.completions.create(**request)`` → ``answer(request)``; fails ``failures`` times first."""

    def __init__(self, answer, failures=0, error=ConnectionError):
        self.requests = []
        self.answer = answer
        self.failures = failures
        self.error = error
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request):
        self.requests.append(request)
        if self.failures:
            self.failures -= 1
            raise self.error("transient failure")
        return self.answer(request)


def shown_responses(content: str):
    """The two responses as presented, from any of the F.1 prompts."""
    match = re.search(r"(?:Summary|Response|Answer) A: ?(.*?)\n(?:Summary|Response|Answer) B: ?(.*?)\n", content, re.S)
    return match.group(1), match.group(2)


def prefers_good(request):
    """A judge that prefers the response containing GOOD, answering in the task's own style."""
    content = request["messages"][0]["content"]
    first, second = shown_responses(content)
    letter = "A" if "GOOD" in first else "B" if "GOOD" in second else "E"
    if "json format, with \"comparison\"" in content:
        return fake_response(f'```json\n{{"comparison": "Response {letter} is better.", "choice": "{letter}"}}\n```')
    if "key is the criteria" in content:
        return fake_response(json.dumps({"Factual accuracy": letter, "Coherence": letter,
                                         "Usefulness overall": letter, "reason": "..."}))
    return fake_response(letter)


def pairs(count=20):
    return [judge_scoring.ResponsePair(f"post number {i}", f"GOOD summary {i}", f"bad summary {i}") for i in range(count)]


def make_client(fake, tmp_path=None, **kwargs):
    cache = str(tmp_path / "cache.jsonl") if tmp_path is not None else None
    return judge_client.CachedJudgeClient(fake, cache, sleep=lambda s: None, **kwargs)


# --------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("text, letter", [
    ("A", "A"), ("b", "B"), ("'E'.", "E"), ("**A**", "A"), (" B\n", "B"), ("(A)", "A"),
    ("B - it is more concise", "B"), ("Response A", "A"), ("Summary B is better.", "B"),
    ("I choose response b.", "B"), ("Answer: A", "A"), ("tie", "E"), ("Equal", "E"),
    ("Summary A is better than Summary B", "A"),
    ("A good summary would mention the cat", None), ("Summary A and Summary B", None), ("garbage", None), ("", None),
])
def test_parse_letter(text, letter):
    assert judge_parse.parse_letter(text) == letter


@pytest.mark.parametrize("text, letter", [
    ('{"comparison": "Response A is more helpful.", "choice": "A"}', "A"),
    ('```json\n{"comparison": "B gives steps.", "choice": "Response B"}\n```', "B"),
    ("{'comparison': 'both fine', 'choice': 'E'}", "E"),
    ('Here you go: {"Comparison": "x", "CHOICE": "b"} hope that helps', "B"),
    ('"comparison": "A is longer", "choice": "A"', "A"),  # braces missing
    ("Response A explains more, so it is more helpful.\nA", "A"),  # no JSON: the letter on the last line
    ('{"comparison": "A and B differ"}', None),
    ("I cannot decide.", None),
])
def test_parse_json_choice_hh_rlhf(text, letter):
    assert judge_parse.parse_json_choice(text) == {"helpfulness": letter}


def test_parse_json_criteria_webgpt():
    text = ('```json\n{"Factual accuracy": "A", "coherence": {"choice": "E", "reason": "both clear"},\n'
            ' "usefulness_overall": "Answer B", "reason": "B answers the question"}\n```')
    assert judge_parse.parse_json_criteria(text, WEBGPT_CRITERIA) == {
        "factual accuracy": "A", "coherence": "E", "usefulness overall": "B"}
    lines = "Factual accuracy: B\n- Coherence: A\nUsefulness overall: E (equally useful)"
    assert judge_parse.parse_json_criteria(lines, WEBGPT_CRITERIA) == {
        "factual accuracy": "B", "coherence": "A", "usefulness overall": "E"}
    partial = '{"Factual accuracy": "A", "Coherence": "maybe"}'
    assert judge_parse.parse_json_criteria(partial, WEBGPT_CRITERIA) == {
        "factual accuracy": "A", "coherence": None, "usefulness overall": None}
    assert judge_parse.parse_json_criteria("no idea", WEBGPT_CRITERIA) == dict.fromkeys(WEBGPT_CRITERIA)


def test_letter_from_top_logprobs():
    assert judge_parse.letter_from_top_logprobs([("The", -0.1), ("B", -2.0), (" A", -2.5), ("A", -2.6)]) == "A"
    assert judge_parse.letter_from_top_logprobs([("E", -0.5), ("B", -1.0)]) == "E"
    assert judge_parse.letter_from_top_logprobs([("The", -0.1), ("a", -0.2)]) is None


def test_prompts_follow_appendix_f1():
    tldr = render(get_task("tldr"), "POST", "first", "second")
    assert "Summary A:first\nSummary B:second\nYour Choice (only a single character):" in tldr
    assert "Relevance" in tldr and "Fluency" in tldr and "output 'E'" in tldr
    hh = render(get_task("hh-rlhf"), "Q", "r1", "r2")
    assert hh.endswith("Query: Q\nResponse A: r1\nResponse B: r2\nYour Judgment:")
    assert '"comparison" and "choice"' in hh
    webgpt = render(get_task("webgpt"), "Q", "r1", "r2")
    assert "**Usefulness overall**" in webgpt and "Answer A: r1\nAnswer B: r2" in webgpt
    single = render_single_char(get_task("webgpt"), "coherence", "Q", "r1", "r2")
    assert "**Coherence**" in single and "Factual" not in single and single.endswith(
        "Your Choice for coherence (only a single character):")


# -------------------------------------------------------------------------- order randomisation, ties
def test_presentation_order_is_seeded_balanced_and_undone():
    prompts = [f"p{i}" for i in range(200)]
    swaps = [judge_scoring.presentation_swapped(1234, i, p) for i, p in enumerate(prompts)]
    assert swaps == [judge_scoring.presentation_swapped(1234, i, p) for i, p in enumerate(prompts)]
    assert swaps != [judge_scoring.presentation_swapped(99, i, p) for i, p in enumerate(prompts)]
    assert 70 < sum(swaps) < 130
    assert judge_scoring.undo_order("A", swapped=False) == judge_scoring.PREFER_A
    assert judge_scoring.undo_order("A", swapped=True) == judge_scoring.PREFER_B
    assert judge_scoring.undo_order("B", swapped=True) == judge_scoring.PREFER_A
    assert judge_scoring.undo_order("E", swapped=True) == judge_scoring.TIE
    assert judge_scoring.undo_order(None, swapped=False) == judge_scoring.UNPARSEABLE


@pytest.mark.parametrize("task_name", ["tldr", "hh-rlhf", "webgpt"])
def test_better_response_wins_whatever_the_order(task_name):
    task = get_task(task_name)
    fake = FakeClient(prefers_good)
    results = judge_scoring.judge_pairs(pairs(), task, judge_requests.JudgeSettings(), make_client(fake), seed=7, concurrency=4)
    assert {r.swapped for r in results} == {True, False}
    shown_first = {shown_responses(r["messages"][0]["content"])[0].startswith("GOOD") for r in fake.requests}
    assert shown_first == {True, False}  # the better response was really shown in both positions
    tallies = judge_scoring.tally_by_criterion(results, task.criteria)
    assert all(t == judge_scoring.Tally(win=20, tie=0, loss=0, unparseable=0) for t in tallies.values())
    assert tallies[task.headline].as_dict()["win_rate"] == 1.0


def test_ties_and_unparseable_answers_are_counted_apart():
    answers = iter(["E", "tie", "A", "no idea", "B", "E"] * 2)
    fake = FakeClient(lambda request: fake_response(next(answers)))
    results = judge_scoring.judge_pairs(pairs(12), get_task("tldr"), judge_requests.JudgeSettings(), make_client(fake),
                                        concurrency=1)
    t = judge_scoring.tally([r.outcomes["overall"] for r in results])
    assert (t.tie, t.unparseable, t.win + t.loss) == (6, 2, 4)
    assert t.rate(t.tie) == pytest.approx(6 / 10)


# ---------------------------------------------------------------------------------- retries and cache
def test_retries_with_exponential_backoff():
    delays = []
    fake = FakeClient(prefers_good, failures=2)
    client = judge_client.CachedJudgeClient(fake, None, max_retries=5, initial_delay_s=0.5, sleep=delays.append)
    results = judge_scoring.judge_pairs(pairs(1), get_task("tldr"), judge_requests.JudgeSettings(), client)
    assert results[0].outcomes["overall"] == judge_scoring.PREFER_A
    assert client.api_calls == 3 and delays == [0.5, 1.0]


def test_gives_up_after_max_retries_and_does_not_retry_client_errors():
    client = make_client(FakeClient(prefers_good, failures=10), max_retries=2)
    with pytest.raises(ConnectionError):
        judge_scoring.judge_pairs(pairs(1), get_task("tldr"), judge_requests.JudgeSettings(), client)
    assert client.api_calls == 3
    client = make_client(FakeClient(prefers_good, failures=1, error=KeyError), max_retries=5)
    with pytest.raises(KeyError):
        judge_scoring.judge_pairs(pairs(1), get_task("tldr"), judge_requests.JudgeSettings(), client)
    assert client.api_calls == 1


def test_cache_makes_a_second_run_free_and_survives_a_cut_line(tmp_path):
    task, settings = get_task("hh-rlhf"), judge_requests.JudgeSettings(model="judge-x")
    first = make_client(FakeClient(prefers_good), tmp_path)
    results = judge_scoring.judge_pairs(pairs(10), task, settings, first, seed=3)
    assert first.api_calls == 10
    with open(tmp_path / "cache.jsonl", "a") as handle:
        handle.write('{"key": "cut sho')  # an interrupted write
    fake = FakeClient(prefers_good)
    second = make_client(fake, tmp_path)
    again = judge_scoring.judge_pairs(pairs(10), task, settings, second, seed=3)
    assert second.api_calls == 0 and fake.requests == []
    assert [r.outcomes for r in again] == [r.outcomes for r in results]
    other_model = make_client(FakeClient(prefers_good), tmp_path)
    judge_scoring.judge_pairs(pairs(10), task, judge_requests.JudgeSettings(model="judge-y"), other_model, seed=3)
    assert other_model.api_calls == 10  # the key covers the model


# ---------------------------------------------------------------------------------- constrained modes
@pytest.mark.parametrize("task_name", sorted(TASKS))
def test_logit_bias_mode_asks_one_token_per_criterion(task_name):
    """The constrained request, pinned: per pair and criterion one single-character prompt (F.1's own for TL;DR)
    with the responses in the shown order, ``max_tokens=1`` and +100 on exactly the given A/B/E ids; its one-token
    answer (with or without the tokenizer's leading space) read back as the verdict."""
    task = get_task(task_name)
    spaced = iter([True, False] * 100)

    def answer(request):  # a one-token answer, as a server applying the bias gives: "A" or " A"
        reply = prefers_good(request).choices[0].message.content
        return fake_response((" " if next(spaced) else "") + reply)

    fake = FakeClient(answer)
    settings = judge_requests.JudgeSettings(model="smollm2", constrain="logit_bias", verdict_token_ids=(49, 50, 53))
    results = judge_scoring.judge_pairs(pairs(4), task, settings, make_client(fake), seed=1, concurrency=1)
    expected_prompts = []
    for index, pair in enumerate(pairs(4)):
        swapped = judge_scoring.presentation_swapped(1, index, pair.prompt)
        shown = (pair.response_b, pair.response_a) if swapped else (pair.response_a, pair.response_b)
        expected_prompts += [render_single_char(task, criterion, pair.prompt, *shown) for criterion in task.criteria]
    assert [r["messages"] for r in fake.requests] == [[{"role": "user", "content": c}] for c in expected_prompts]
    assert all(r["max_tokens"] == 1 and r["logit_bias"] == {"49": 100.0, "50": 100.0, "53": 100.0}
               and r["temperature"] == 0.0 and "logprobs" not in r for r in fake.requests)
    assert {r.swapped for r in results} == {True, False}
    assert all(r.outcomes == dict.fromkeys(task.criteria, judge_scoring.PREFER_A) for r in results)
    with pytest.raises(ValueError, match="token ids"):
        judge_requests.JudgeSettings(constrain="logit_bias")


@pytest.mark.parametrize("task_name", sorted(TASKS))
def test_reason_first_asks_the_verdict_after_the_judges_free_answer_to_f1(task_name):
    """``--reason_first``: per pair the F.1 prompt verbatim with a free answer (no bias, ``max_tokens`` as set),
    then per criterion the same conversation with that answer and the follow-up question, constrained to one
    token; TL;DR, whose F.1 prompt already asks for one character, is asked once per pair, constrained."""
    task = get_task(task_name)

    def answer(request):
        if request["max_tokens"] == 1:  # the constrained verdict: the letter of the response with GOOD in it
            first, second = shown_responses(request["messages"][0]["content"])
            return fake_response("A" if "GOOD" in first else "B" if "GOOD" in second else "E")
        return fake_response(f"reasons number {len(fake.requests)}")

    fake = FakeClient(answer)
    settings = judge_requests.JudgeSettings(constrain="logit_bias", verdict_token_ids=(49, 50, 53), reason_first=True,
                                            max_tokens=77)
    results = judge_scoring.judge_pairs(pairs(4), task, settings, make_client(fake), seed=1, concurrency=1)
    expected = []
    for index, pair in enumerate(pairs(4)):
        swapped = judge_scoring.presentation_swapped(1, index, pair.prompt)
        shown = (pair.response_b, pair.response_a) if swapped else (pair.response_a, pair.response_b)
        f1 = {"role": "user", "content": render(task, pair.prompt, *shown)}
        if task_name == "tldr":
            expected.append(([f1], 1))
            continue
        expected.append(([f1], 77))
        reasons = {"role": "assistant", "content": f"reasons number {len(expected)}"}
        expected += [([f1, reasons, {"role": "user", "content": f"Your Choice for {c} (only a single character):"}], 1)
                     for c in task.criteria]
    assert [(r["messages"], r["max_tokens"]) for r in fake.requests] == expected
    assert all(("logit_bias" in r) == (r["max_tokens"] == 1) for r in fake.requests)
    assert all(r.outcomes == dict.fromkeys(task.criteria, judge_scoring.PREFER_A) for r in results)
    with pytest.raises(ValueError, match="--reason_first.*--constrain"):
        judge_requests.JudgeSettings(reason_first=True)


def test_reason_first_on_the_command_line(tmp_path, monkeypatch, capsys):
    fake = FakeClient(lambda request: fake_response("A" if request["max_tokens"] == 1 else "Response A is better."))
    monkeypatch.setattr(judge, "make_openai_client", lambda base_url, api_key, timeout: fake)
    a, b = judge_files(tmp_path, count=2)
    argv = ["--task", "hh-rlhf", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--cache", "",
            "--no_progress_bar", "--reason_first"]
    judge.main(argv + ["--constrain", "logit_bias", "--verdict_token_ids", "49,50,53"])
    assert [len(r["messages"]) for r in fake.requests] == [1, 3, 1, 3]  # F.1 answered freely, then the verdict
    assert "helpfulness" in capsys.readouterr().out
    assert one_line_error(judge.main, argv, capsys) == ("error: --reason_first reads a constrained verdict after the "
                                                       "free answer: add --constrain logit_bias or --constrain logprobs")


def test_verdict_token_ids_are_the_single_token_letters():
    vocab = {"A": [49], "B": [50], "E": [53], " A": [330], " B": [389], " E": [30, 53]}
    assert judge_requests.verdict_token_ids(vocab.__getitem__) == (49, 50, 53, 330, 389)


def test_verdict_token_ids_and_a_missing_gguf_on_the_command_line(tmp_path, monkeypatch, capsys):
    fake = FakeClient(prefers_good)
    monkeypatch.setattr(judge, "make_openai_client", lambda base_url, api_key, timeout: fake)
    a, b = judge_files(tmp_path, count=2)
    argv = ["--task", "hh-rlhf", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--cache", "",
            "--constrain", "logit_bias", "--no_progress_bar"]
    judge.main(argv + ["--verdict_token_ids", "49,50,53"])
    assert [r["logit_bias"] for r in fake.requests] == [{"49": 100.0, "50": 100.0, "53": 100.0}] * 2
    assert "helpfulness" in capsys.readouterr().out
    missing = str(tmp_path / "judge.gguf")
    assert one_line_error(judge.main, argv + ["--judge_tokenizer", missing], capsys) == \
        f"error: --judge_tokenizer {missing}: no such file"


def test_logprobs_mode_reads_the_first_token_distribution():
    def answer(request):
        first, _ = shown_responses(request["messages"][0]["content"])
        good_first = "GOOD" in first
        return fake_response("The", [("The", -0.2), ("A", -1.0 if good_first else -3.0),
                                     ("B", -3.0 if good_first else -1.0)])

    fake = FakeClient(answer)
    settings = judge_requests.JudgeSettings(constrain="logprobs")
    results = judge_scoring.judge_pairs(pairs(8), get_task("tldr"), settings, make_client(fake))
    assert all(r["logprobs"] is True and r["top_logprobs"] == 20 and r["max_tokens"] == 1 for r in fake.requests)
    assert [r.outcomes["overall"] for r in results] == [judge_scoring.PREFER_A] * 8


# ----------------------------------------------------------------------------------------- I/O and CLI
def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_alignment_by_prompt_and_errors(tmp_path):
    a = [{"prompt": "p1", "response": "a1"}, {"prompt": "p2", "response": "a2"}, {"prompt": "p1", "response": "a1'"}]
    b = [{"prompt": "p2", "response": "b2"}, {"prompt": "p1", "response": "b1"}, {"prompt": "p1", "response": "b1'"}]
    aligned = judge.align_by_prompt(a, b)
    assert [(p.prompt, p.response_a, p.response_b) for p in aligned] == [
        ("p1", "a1", "b1"), ("p2", "a2", "b2"), ("p1", "a1'", "b1'")]
    with pytest.raises(ValueError, match=r"a.jsonl row 2: no response to this prompt in b.jsonl"):
        judge.align_by_prompt(a[:1] + [{"prompt": "p3", "response": "x"}], b, "a.jsonl", "b.jsonl")
    with pytest.raises(ValueError, match=r"b.jsonl row 2: no response"):
        judge.align_by_prompt(a[:1], b[1:2] + b[:1], "a.jsonl", "b.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "response": "r"}\n{"prompt": "p"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl row 2: needs a string 'response'"):
        judge.read_response_rows(str(bad))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        judge.read_response_rows(str(tmp_path / "missing.jsonl"))


def test_cli_end_to_end_with_fake_client(tmp_path, monkeypatch, capsys):
    fake = FakeClient(prefers_good)
    monkeypatch.setattr(judge, "make_openai_client", lambda base_url, api_key, timeout: fake)
    a = write_jsonl(tmp_path / "mappo.jsonl", [{"prompt": p.prompt, "response": p.response_a} for p in pairs(6)])
    b = write_jsonl(tmp_path / "ppo.jsonl", [{"prompt": p.prompt, "response": p.response_b} for p in pairs(6)][::-1])
    argv = ["--task", "tldr", "--a", a, "--b", b, "--limit", "5", "--base_url", "http://localhost:1/v1",
            "--model", "m", "--cache", str(tmp_path / "c.jsonl"), "--output", str(tmp_path / "v.jsonl"),
            "--summary", str(tmp_path / "s.json"), "--no_progress_bar"]
    judge.main(argv)
    out = capsys.readouterr().out
    assert "5 pairs" in out and "mappo (A) vs ppo (B)" in out and "100.0%" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["criteria"]["overall"]["win"] == 5 and summary["a"] == "mappo"
    verdicts = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [v["verdict"] for v in verdicts] == ["a"] * 5
    judge.main(argv)
    assert "0 API calls" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        judge.main(["--task", "tldr", "--a", a, "--b", str(tmp_path / "nope.jsonl"), "--base_url", "x"])
    assert "nope.jsonl: no such file" in capsys.readouterr().err


def test_report_names_the_model_that_answered_not_the_alias(tmp_path, monkeypatch, capsys):
    """Asked for "gpt-4o", answered by whatever the server's responses name (issue: `judge gpt-4o` was printed
    while a local SmolLM2 answered)."""
    fake = FakeClient(lambda request: fake_response("A", model="/models/smollm2@main"))
    monkeypatch.setattr(judge, "make_openai_client", lambda base_url, api_key, timeout: fake)
    rows = [{"prompt": p.prompt, "response": p.response_a} for p in pairs(3)]
    a, b = write_jsonl(tmp_path / "a.jsonl", rows), write_jsonl(tmp_path / "b.jsonl", rows)
    argv = ["--task", "tldr", "--a", a, "--b", b, "--model", "gpt-4o", "--base_url", "http://localhost:1/v1",
            "--cache", str(tmp_path / "c.jsonl"), "--output", str(tmp_path / "v.jsonl"),
            "--summary", str(tmp_path / "s.json"), "--no_progress_bar"]
    judge.main(argv)
    out = capsys.readouterr().out
    assert out.startswith("judge smollm2@main (asked for gpt-4o) on tldr")  # a path is named by its last folder
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["model"], summary["model_id"]) == ("smollm2@main", "/models/smollm2@main")
    verdicts = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert {v["judge_model"] for v in verdicts} == {"/models/smollm2@main"}
    judge.main(argv)  # from the cache: the answering model was cached with the completion
    assert capsys.readouterr().out.startswith("judge smollm2@main (asked for gpt-4o)")


def test_a_judge_that_always_picks_one_position_is_reported_as_position_biased(tmp_path, monkeypatch, capsys):
    """Every verdict "A" (SmolLM2 gave 64/64 here): the report says the judge answers by position; a judge that
    follows the content (whatever the order) is not flagged."""
    rows_a = [{"prompt": p.prompt, "response": p.response_a} for p in pairs(6)]
    rows_b = [{"prompt": p.prompt, "response": p.response_b} for p in pairs(6)]
    a, b = write_jsonl(tmp_path / "a.jsonl", rows_a), write_jsonl(tmp_path / "b.jsonl", rows_b)
    argv = ["--task", "tldr", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--cache", "",
            "--summary", str(tmp_path / "s.json"), "--no_progress_bar"]
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: FakeClient(lambda request: fake_response("A")))
    judge.main(argv)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == ("warning: position bias: the judge answered A (the response shown first) for all 6 parsed "
                         "pairs, whatever the responses; these rates reflect the presentation order, not quality")
    assert json.loads((tmp_path / "s.json").read_text())["position_bias"] is True
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: FakeClient(prefers_good))
    judge.main(argv)
    assert "position bias" not in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["position_bias"] is False


def test_all_unparseable_run_shows_counts_not_nan(tmp_path, monkeypatch, capsys):
    fake = FakeClient(lambda request: fake_response("I cannot decide."))
    monkeypatch.setattr(judge, "make_openai_client", lambda base_url, api_key, timeout: fake)
    rows = [{"prompt": p.prompt, "response": p.response_a} for p in pairs(4)]
    a, b = write_jsonl(tmp_path / "a.jsonl", rows), write_jsonl(tmp_path / "b.jsonl", rows)
    judge.main(["--task", "tldr", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--cache", "",
                "--summary", str(tmp_path / "s.json"), "--no_progress_bar", "--max_unparseable", "1"])
    out = capsys.readouterr().out
    assert "nan" not in out.lower()
    assert re.search(r"overall\s+0\s+0\s+0\s+4\s+n/a\s+n/a\s+n/a", out)
    counts = json.loads((tmp_path / "s.json").read_text())["criteria"]["overall"]  # strict JSON: no NaN
    assert counts == {"win": 0, "tie": 0, "loss": 0, "unparseable": 4, "win_rate": None, "tie_rate": None,
                      "loss_rate": None}


def test_logprobs_mode_fails_when_the_server_ignores_logprobs():
    """`transformers serve` accepts `logprobs` and returns none: say so rather than read the greedy token."""
    fake = FakeClient(lambda request: fake_response("A"))  # no logprobs in the response
    settings = judge_requests.JudgeSettings(constrain="logprobs")
    with pytest.raises(ValueError, match="returned no top_logprobs.*--constrain logit_bias"):
        judge_scoring.judge_pairs(pairs(2), get_task("tldr"), settings, make_client(fake))


def judge_files(tmp_path, count=4):
    rows_a = [{"prompt": p.prompt, "response": p.response_a} for p in pairs(count)]
    rows_b = [{"prompt": p.prompt, "response": p.response_b} for p in pairs(count)]
    return write_jsonl(tmp_path / "a.jsonl", rows_a), write_jsonl(tmp_path / "b.jsonl", rows_b)


def test_a_refused_model_is_one_line_after_one_request(tmp_path, monkeypatch, capsys):
    """A wrong --model (HTTP 400 from the server): one request, one line, no traceback, nothing else sent."""
    import httpx
    import openai

    def bad_request(message):
        request = httpx.Request("POST", "http://localhost:1/v1/chat/completions")
        return openai.BadRequestError(message, response=httpx.Response(400, request=request), body=None)

    fake = FakeClient(prefers_good, failures=99, error=bad_request)
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: fake)
    a, b = judge_files(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        judge.main(["--task", "tldr", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--model", "nope",
                    "--cache", "", "--no_progress_bar", "--summary", str(tmp_path / "out" / "s.json")])
    assert exit_info.value.code == 2 and len(fake.requests) == 1
    assert not (tmp_path / "out").exists()  # no empty output folder left behind
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: judge server http://localhost:1/v1 answered HTTP 400 to --model nope on the first "
                   "request: transient failure"]


def test_output_paths_are_checked_before_the_first_request(tmp_path, monkeypatch, capsys):
    fake = FakeClient(prefers_good)
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: fake)
    a, b = judge_files(tmp_path)
    base = ["--task", "tldr", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--cache", "",
            "--no_progress_bar"]
    (tmp_path / "taken").write_text("a file where a folder should be")
    with pytest.raises(SystemExit):
        judge.main(base + ["--summary", str(tmp_path / "taken" / "s.json")])
    assert capsys.readouterr().err.startswith(f"error: {tmp_path}/taken/s.json: cannot create its folder")
    assert fake.requests == []  # checked before any request
    judge.main(base + ["--output", str(tmp_path / "new" / "v.jsonl"), "--summary", str(tmp_path / "new" / "s.json")])
    assert json.loads((tmp_path / "new" / "s.json").read_text())["pairs"] == 4
    assert len((tmp_path / "new" / "v.jsonl").read_text().splitlines()) == 4


def test_judge_prompt_file_is_a_users_own_task(tmp_path, monkeypatch, capsys):
    prompt = tmp_path / "recipes.txt"
    prompt.write_text("Which recipe answers {prompt} better?\nResponse A: {response_a}\nResponse B: {response_b}\n"
                      "Answer with one character, A or B (E if equal). Format {{note}} stays literal.\n")
    fake = FakeClient(prefers_good)
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: fake)
    a, b = judge_files(tmp_path)
    judge.main(["--judge_prompt", str(prompt), "--a", a, "--b", b, "--base_url", "http://localhost:1/v1",
                "--cache", "", "--summary", str(tmp_path / "s.json"), "--no_progress_bar"])
    assert fake.requests[0]["messages"][0]["content"].startswith("Which recipe answers post number 0 better?")
    assert "Format {note} stays literal." in fake.requests[0]["messages"][0]["content"]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["task"], summary["criteria"]["overall"]["win"]) == ("recipes", 4)
    assert capsys.readouterr().out.startswith("judge ")
    bad = tmp_path / "bad.txt"
    for text, expected in [("Compare {response_a} and {response_b}.", "no {prompt} in it"),
                           ("{prompt} {response_a} {response_b} {extra}", "unexpected placeholder 'extra'")]:
        bad.write_text(text)
        with pytest.raises(SystemExit):
            judge.main(["--judge_prompt", str(bad), "--a", a, "--b", b, "--base_url", "x", "--cache", ""])
        assert expected in capsys.readouterr().err
    with pytest.raises(SystemExit):  # neither --task nor --judge_prompt
        judge.main(["--a", a, "--b", b, "--base_url", "x", "--cache", ""])
    assert "give one of --task" in capsys.readouterr().err


def test_a_judge_that_nearly_always_picks_one_position_is_flagged_and_the_plot_says_so(tmp_path, monkeypatch,
                                                                                     capsys):
    """19 of 20 verdicts "A" (the first shown): flagged (>= 90%), written to the summary, marked on the winrates
    bar with the pair count and warned about by `plots winrates`; 17 of 20 is not flagged."""
    from evaluation import plots

    rows = [{"prompt": p.prompt, "response": p.response_a} for p in pairs(20)]
    a, b = write_jsonl(tmp_path / "a.jsonl", rows), write_jsonl(tmp_path / "b.jsonl", rows)
    summary = tmp_path / "s.json"
    argv = ["--task", "tldr", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--cache", "",
            "--summary", str(summary), "--no_progress_bar", "--concurrency", "1"]

    def answers(b_count):
        calls = []

        def answer(request):
            calls.append(request)
            return fake_response("B" if len(calls) <= b_count + 1 and len(calls) > 1 else "A")
        return answer  # request 1 is the lone first pair (A), then b_count pairs answer B, the rest A
    for b_count, flagged in ((1, True), (3, False)):
        monkeypatch.setattr(judge, "make_openai_client", lambda *args, b_count=b_count: FakeClient(answers(b_count)))
        judge.main(argv)
        out = capsys.readouterr().out
        assert ("for 19 of 20 parsed pairs" in out) == flagged and json.loads(summary.read_text())["position_bias"] \
            == flagged
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: FakeClient(answers(1)))
    judge.main(argv)
    capsys.readouterr()
    captured = {}
    monkeypatch.setattr(plots.plt, "close", lambda fig: captured.setdefault("fig", fig))
    plots.main(["winrates", "--summary", str(summary), "--out", str(tmp_path / "w.png")])
    labels = [label.get_text() for label in captured["fig"].axes[0].get_yticklabels()]
    assert labels == ["tldr: a vs b (n=20)\nPOSITION BIAS: one letter for nearly every pair"]
    assert "warning: " + str(summary) + ": warning: position bias" in capsys.readouterr().err


def test_answers_that_do_not_parse_above_the_threshold_end_in_one_line(tmp_path, monkeypatch, capsys):
    """WebGPT answers that are not the criteria JSON (the issue: 10/10 unparseable, exit 0, empty bars): the
    table and the raw answers are written, the summary (what the plots read) is not, exit 2 with one line."""
    fake = FakeClient(lambda request: fake_response("Both answers are fine."))
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: fake)
    a, b = judge_files(tmp_path, count=10)
    argv = ["--task", "webgpt", "--a", a, "--b", b, "--base_url", "http://localhost:1/v1", "--cache", "",
            "--no_progress_bar", "--output", str(tmp_path / "v.jsonl"), "--summary", str(tmp_path / "s.json")]
    with pytest.raises(SystemExit) as exit_info:
        judge.main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and "unparsed" in captured.out
    assert captured.err.splitlines() == [
        "error: the judge's answers did not parse for 10 of 10 pairs on factual accuracy (100% > --max_unparseable "
        f"0.2): the judge model or its prompt is wrong for this task; its raw answers are in {tmp_path}/v.jsonl; no "
        "--summary written"]
    assert len((tmp_path / "v.jsonl").read_text().splitlines()) == 10 and not (tmp_path / "s.json").exists()
    answers = iter(["A", "nonsense"] + ["A"] * 8)  # 1 of 10 unparseable: within 0.2
    monkeypatch.setattr(judge, "make_openai_client", lambda *args: FakeClient(lambda r: fake_response(next(answers))))
    judge.main(["--task", "tldr", *argv[2:]])
    assert json.loads((tmp_path / "s.json").read_text())["criteria"]["overall"]["unparseable"] == 1


def test_a_refused_connection_fails_at_once_in_one_line(tmp_path, capsys):
    """Nothing listens at --base_url: no retries (they took 33 s), one line, no output folder."""
    import socket
    import time

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    a, b = judge_files(tmp_path)
    start = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        judge.main(["--task", "tldr", "--a", a, "--b", b, "--base_url", f"http://127.0.0.1:{port}/v1", "--cache", "",
                    "--no_progress_bar", "--concurrency", "1", "--summary", str(tmp_path / "out" / "s.json")])
    assert exit_info.value.code == 2 and time.monotonic() - start < 10
    assert capsys.readouterr().err.splitlines() == [
        f"error: judge server http://127.0.0.1:{port}/v1: connection refused (nothing listens there: start the "
        "server, or check --base_url)"]
    assert not (tmp_path / "out").exists()
