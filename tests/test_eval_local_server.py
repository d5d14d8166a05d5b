"""The local OpenAI-compatible server: request validation, decoding rules, and the HTTP protocol as the official
``openai`` client sees it (with a stand-in model, so no weights are loaded; the real SmolLM2 run is the opt-in
integration test)."""
from __future__ import annotations

import threading

import openai
import pytest
import torch

from evaluation import local_server
from evaluation.local_server import Generation, RequestError, SamplingRequest, next_token, parse_request

MESSAGES = [{"role": "user", "content": "Which is better?"}]


def test_parse_request_reads_the_openai_fields():
    request = parse_request({"messages": MESSAGES, "max_tokens": 1, "temperature": 0, "logprobs": True,
                             "top_logprobs": 5, "logit_bias": {"49": 100, "50": -100}, "stop": "\n", "seed": 3},
                            vocab_size=100)
    assert request == SamplingRequest(messages=MESSAGES, max_tokens=1, temperature=0.0, top_p=1.0, seed=3,
                                      stop=("\n",), top_logprobs=5, logit_bias=((49, 100.0), (50, -100.0)))
    assert parse_request({"messages": MESSAGES, "max_completion_tokens": 7}, 100).max_tokens == 7
    assert parse_request({"messages": MESSAGES}, 100).top_logprobs is None


@pytest.mark.parametrize("body, message", [
    ({"messages": []}, "non-empty list"),
    ({"messages": [{"role": "user"}]}, "string content"),
    ({"messages": MESSAGES, "stream": True}, "streaming"),
    ({"messages": MESSAGES, "n": 2}, "n=1"),
    ({"messages": MESSAGES, "max_tokens": 0}, "positive integer"),
    ({"messages": MESSAGES, "logprobs": True, "top_logprobs": 21}, "between 0 and 20"),
    ({"messages": MESSAGES, "logit_bias": {"x": 1}}, "not token id"),
    ({"messages": MESSAGES, "logit_bias": {"100": 1}}, "outside the vocabulary"),
])
def test_parse_request_rejects_bad_requests(body, message):
    with pytest.raises(RequestError, match=message):
        parse_request(body, vocab_size=100)


def test_next_token_greedy_and_nucleus():
    logits = torch.tensor([0.0, 3.0, 2.9, -5.0])
    generator = torch.Generator().manual_seed(0)
    assert next_token(logits, 0.0, 1.0, generator) == 1
    draws = {next_token(logits, 1.0, 0.5, generator) for _ in range(50)}
    assert draws == {1}  # token 1 alone holds more than half the mass
    draws = {next_token(logits, 1.0, 1.0, generator) for _ in range(200)}
    assert {1, 2} <= draws


class EchoModel:
    """Stands in for ChatModel: answers with the biased letter, or echoes the last message."""

    vocab_size = 100

    def generate(self, request: SamplingRequest) -> Generation:
        text = "A" if request.logit_bias else request.messages[-1]["content"][:request.max_tokens]
        logprobs = None
        if request.top_logprobs is not None:
            top = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in (("A", -0.1), ("B", -2.5))]
            logprobs = [{"token": "A", "logprob": -0.1, "bytes": [65], "top_logprobs": top[:request.top_logprobs]}]
        return Generation(text=text, finish_reason="stop", prompt_tokens=5, completion_tokens=1, logprobs=logprobs)


@pytest.fixture()
def client():
    server = local_server.make_server(EchoModel(), "echo", port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="unused", max_retries=0)
    server.shutdown()
    server.server_close()


def test_openai_client_round_trip(client):
    response = client.chat.completions.create(model="echo", messages=MESSAGES, max_tokens=5, temperature=0)
    assert response.choices[0].message.content == "Which"
    assert response.model == "echo" and response.usage.total_tokens == 6
    biased = client.chat.completions.create(model="echo", messages=MESSAGES, max_tokens=1, logit_bias={"49": 100},
                                            logprobs=True, top_logprobs=2)
    assert biased.choices[0].message.content == "A"
    assert [(t.token, t.logprob) for t in biased.choices[0].logprobs.content[0].top_logprobs] == [
        ("A", -0.1), ("B", -2.5)]
    assert [m.id for m in client.models.list().data] == ["echo"]
    with pytest.raises(openai.BadRequestError, match="streaming is not supported"):
        client.chat.completions.create(model="echo", messages=MESSAGES, stream=False, n=1,
                                       extra_body={"stream": True})
