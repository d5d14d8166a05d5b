"""The judge's HTTP side: an OpenAI-compatible client behind an append-only JSONL completion cache, with
exponential-backoff retries of transient failures (and none of a refused connection)."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from typing import Callable, Dict, Mapping, Optional

RETRYABLE_STATUS = {408, 409, 429}


def connection_refused(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a refused connection: nothing listens at the address, which
    retrying does not cure (a server still starting answers on its port, or times out)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConnectionRefusedError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def is_retryable(error: BaseException) -> bool:
    """Transient failures: connection problems (not a refused connection), time-outs, rate limits and server
    errors (5xx)."""
    import openai

    if connection_refused(error):
        return False
    if isinstance(error, (openai.APIConnectionError, openai.APITimeoutError, ConnectionError, TimeoutError)):
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRYABLE_STATUS or error.status_code >= 500
    return False


def request_key(request: Mapping) -> str:
    """Cache key: a hash of the model, the messages and every sampling parameter."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def completion_fields(response) -> dict:
    """``{"text", "top_logprobs", "model"}`` from an OpenAI chat-completion response: top log-probs of the first
    token as ``[token, logprob]`` pairs (empty when not requested), and the model that actually answered (the
    response's ``model`` field: e.g. ``gpt-4o-2024-08-06`` for ``gpt-4o``, or the directory a local server
    serves, whatever name was asked for)."""
    choice = response.choices[0]
    top = []
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if content:
        top = [[entry.token, float(entry.logprob)] for entry in content[0].top_logprobs]
    return {"text": choice.message.content or "", "top_logprobs": top, "model": getattr(response, "model", None)}


class CachedJudgeClient:
    """An OpenAI-compatible client behind an append-only JSONL cache, with exponential-backoff retries.

    ``api_calls`` counts requests actually sent (retries included); cached requests cost none."""

    def __init__(self, client, cache_path: Optional[str], max_retries: int = 5, initial_delay_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.client = client
        self.cache_path = cache_path
        self.max_retries = max_retries
        self.initial_delay_s = initial_delay_s
        self.sleep = sleep
        self.api_calls = 0
        self._lock = threading.Lock()
        self._cache = self._load_cache(cache_path)

    @staticmethod
    def _load_cache(path: Optional[str]) -> Dict[str, dict]:
        cache: Dict[str, dict] = {}
        if path and os.path.exists(path):
            with open(path) as handle:
                for line in handle:
                    try:
                        entry = json.loads(line)
                        cache[entry["key"]] = entry["completion"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut short by an interrupted run
        return cache

    def _store(self, key: str, model: str, completion: dict) -> None:
        with self._lock:
            self._cache[key] = completion
            if self.cache_path:
                os.makedirs(os.path.dirname(os.path.abspath(self.cache_path)), exist_ok=True)
                with open(self.cache_path, "a") as handle:
                    handle.write(json.dumps({"key": key, "model": model, "completion": completion}) + "\n")

    def _send(self, request: dict):
        attempt = 0
        while True:
            with self._lock:
                self.api_calls += 1
            try:
                return self.client.chat.completions.create(**request)
            except Exception as error:  # noqa: BLE001 -- classified by is_retryable, others re-raised
                if attempt >= self.max_retries or not is_retryable(error):
                    raise
                self.sleep(self.initial_delay_s * 2 ** attempt)
                attempt += 1

    def complete(self, request: dict) -> dict:
        key = request_key(request)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        completion = completion_fields(self._send(request))
        self._store(key, request["model"], completion)
        return completion


def make_openai_client(base_url: Optional[str], api_key: Optional[str], timeout: float):
    import openai

    key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
    if key is None:
        raise ValueError("no API key: set OPENAI_API_KEY or pass --api_key (or --base_url for a local server)")
    return openai.OpenAI(api_key=key, base_url=base_url, timeout=timeout, max_retries=0)

