"""LLM-as-judge pairwise win rates (paper Fig. 4, Fig. 5 right, Fig. 17; prompts of Appendix F.1) against any
OpenAI-compatible chat-completions server.

    python -m evaluation.judge --task tldr --a mappo.jsonl --b ppo.jsonl --model gpt-4o
    python -m evaluation.judge --task tldr --a mappo.jsonl --b ppo.jsonl --base_url http://127.0.0.1:8000/v1 \\
        --model "$JUDGE" --constrain logit_bias --judge_tokenizer "$JUDGE"     # `transformers serve "$JUDGE"`

Each input file is JSONL with "prompt" and "response" per line; rows are paired by prompt (the k-th occurrence
of a prompt in --a with its k-th occurrence in --b). For every pair the order in which the two responses are
shown is drawn from --seed (paper §4.1: "randomizing the order of responses") and undone when scoring, so a
verdict always reads "A's file wins / tie / B's file wins". Completions are cached on disk (JSONL keyed by a
hash of model, messages and sampling parameters): an interrupted run resumes without paying twice. The report
names the model that actually answered (the responses' ``model`` field), beside the name asked for.

Small judges (a 135M model does not follow "answer with one character") can be constrained: ``--constrain
logit_bias`` biases the A/B/E token ids with ``max_tokens=1``; ``--constrain logprobs`` reads the first token's
``top_logprobs`` and takes the most probable of A / B / E (a server that ignores ``logprobs``, such as
``transformers serve``, is reported as an error). Both ask one single-character question per
criterion (``evaluation.judge_prompts.render_single_char``).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import re
import sys
import threading
import time
from collections import Counter, defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from dschat.core.entrypoint import ArgumentParser
from evaluation.jsonl import read_jsonl
from evaluation.judge_prompts import JSON_CHOICE, JSON_CRITERIA, SINGLE_CHAR, TASKS, JudgeTask, get_task, render, \
    render_single_char

LETTERS = ("A", "B", "E")
PREFER_A, PREFER_B, TIE, UNPARSEABLE = "a", "b", "tie", "unparseable"
CONSTRAIN_MODES = ("none", "logit_bias", "logprobs")

# ---------------------------------------------------------------------------------------------- parsing
_STRIP_CHARS = " \t\r\n'\"`*_.:;,!?()[]{}<>"
_TIE_WORDS = {"tie", "equal", "equally good", "equally bad", "both", "same", "neither", "draw"}
_LEADING_LETTER = re.compile(r"^[\s'\"`*_(\[]*([ABE])(?:$|[ \t]*(?:\r?\n|[()\[\].:;,!'\"`*_\-])|\s+(?i:is|wins|because|since)\b)")
_NAMED_LETTER = re.compile(r"(?i:\b(?:summary|response|answer|option|choice|assistant)\s*[:#\-]?\s*\(?['\"]?)([ABEabe])\b")
_BETTER_LETTER = re.compile(r"\b([ABE])['\"]?\s+(?i:is\s+(?:the\s+)?(?:better|more|preferred|superior))")
_CODE_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def parse_letter(text: str) -> Optional[str]:
    """The verdict letter 'A', 'B' or 'E' in a short answer, or None when it names none or both.

    Accepts "A", "a", "'B'.", "**E**", "B - it is concise", "Response A", "Summary B is better", "tie"."""
    text = str(text)
    cleaned = text.strip(_STRIP_CHARS)
    if cleaned.upper() in LETTERS:
        return cleaned.upper()
    if cleaned.lower() in _TIE_WORDS:
        return "E"
    leading = _LEADING_LETTER.match(text)
    if leading:
        return leading.group(1)
    for pattern in (_NAMED_LETTER, _BETTER_LETTER):
        named = {letter.upper() for letter in pattern.findall(text)}
        if len(named) == 1:
            return named.pop()
    return None


def extract_json_object(text: str) -> Optional[dict]:
    """The first JSON object in ``text`` (inside a ```json code fence or between the outer braces); Python-style
    single quotes are accepted. None when there is none."""
    fenced = _CODE_FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        return None
    candidate = body[start:end + 1]
    for load in (json.loads, ast.literal_eval):
        try:
            value = load(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _normalise_key(key) -> str:
    return re.sub(r"[^a-z]+", " ", str(key).lower()).strip()


def _choice_value(value) -> Optional[str]:
    """A criterion's value: a letter string, or a nested object with a choice-like key."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if _normalise_key(key) in ("choice", "answer", "value", "verdict", "winner"):
                return parse_letter(inner)
        return None
    return parse_letter(value)


def parse_single_char(text: str) -> Dict[str, Optional[str]]:
    """TL;DR (Appendix F.1): a single character."""
    return {"overall": parse_letter(text)}


def parse_json_choice(text: str) -> Dict[str, Optional[str]]:
    """HH-RLHF (Appendix F.1): JSON with "comparison" and "choice"; without JSON, a "choice:" line or the last
    line (the prompt asks for the letter "on a new line")."""
    obj = extract_json_object(text)
    if obj is not None:
        for key, value in obj.items():
            if _normalise_key(key) == "choice":
                return {"helpfulness": _choice_value(value)}
    choice_line = re.search(r"(?i)\bchoice\b['\"]?\s*[:=]\s*(.+)", text)
    if choice_line:
        return {"helpfulness": parse_letter(choice_line.group(1).strip().rstrip("},"))}
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return {"helpfulness": parse_letter(lines[-1]) if lines else None}


def parse_json_criteria(text: str, criteria: Sequence[str]) -> Dict[str, Optional[str]]:
    """WebGPT (Appendix F.1): JSON mapping each criterion to a letter (keys matched by their first word, so
    "Factual accuracy", "factual_accuracy" and "FACTUAL ACCURACY" all count); without JSON, "criterion: X"
    lines. A criterion that is missing is None."""
    obj = extract_json_object(text)
    verdicts: Dict[str, Optional[str]] = {}
    for criterion in criteria:
        keyword = criterion.split()[0]
        verdict = None
        if obj is not None:
            for key, value in obj.items():
                if keyword in _normalise_key(key).split():
                    verdict = _choice_value(value)
                    break
        else:
            line = re.search(rf"(?im)^[\s*\-\"']*{keyword}[^:\n]*[:=]\s*(.+)$", text)
            verdict = parse_letter(line.group(1)) if line else None
        verdicts[criterion] = verdict
    return verdicts


def parse_answer(task: JudgeTask, text: str) -> Dict[str, Optional[str]]:
    """Criterion → presented letter ('A', 'B', 'E') or None (unparseable) for a free-text judge answer."""
    if task.style == SINGLE_CHAR:
        return parse_single_char(text)
    if task.style == JSON_CHOICE:
        return parse_json_choice(text)
    if task.style == JSON_CRITERIA:
        return parse_json_criteria(text, task.criteria)
    raise ValueError(f"unknown answer style {task.style!r}")


def letter_from_top_logprobs(top_logprobs: Sequence[Tuple[str, float]]) -> Optional[str]:
    """The most probable of A / B / E among the first token's top log-probabilities (probabilities of tokens
    that strip to the same letter, e.g. "A" and " A", are added); None when none of them is listed."""
    mass: Dict[str, float] = defaultdict(float)
    for token, logprob in top_logprobs:
        letter = token.strip()
        if letter in LETTERS:
            mass[letter] += math.exp(logprob)
    return max(mass, key=mass.get) if mass else None


# ------------------------------------------------------------------------------------ order randomisation
def presentation_swapped(seed: int, index: int, prompt: str) -> bool:
    """Whether pair ``index`` is shown as (B's response, A's response): a fair coin drawn from a hash of the
    seed, the pair's position and its prompt, so it does not depend on the thread schedule or on --limit."""
    digest = hashlib.sha256(f"{seed}\x00{index}\x00{prompt}".encode()).digest()
    return bool(digest[0] & 1)


def undo_order(letter: Optional[str], swapped: bool) -> str:
    """A presented letter → which input file won: ``"a"``, ``"b"``, ``"tie"`` or ``"unparseable"``."""
    if letter is None:
        return UNPARSEABLE
    if letter == "E":
        return TIE
    first_shown_wins = letter == "A"
    return PREFER_A if first_shown_wins != swapped else PREFER_B


# ------------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class JudgeSettings:
    """What is sent to the judge. ``verdict_token_ids`` are the judge tokenizer's ids of A / B / E (needed by
    ``constrain="logit_bias"`` only)."""

    model: str = "gpt-4o"
    temperature: float = 0.0
    max_tokens: int = 256
    constrain: str = "none"
    verdict_token_ids: Tuple[int, ...] = ()
    top_logprobs: int = 20
    logit_bias: float = 100.0

    def __post_init__(self):
        if self.constrain not in CONSTRAIN_MODES:
            raise ValueError(f"--constrain {self.constrain}: choose one of {', '.join(CONSTRAIN_MODES)}")
        if self.constrain == "logit_bias" and not self.verdict_token_ids:
            raise ValueError("--constrain logit_bias needs the judge's A/B/E token ids "
                             "(--verdict_token_ids or --judge_tokenizer)")


def chat_request(settings: JudgeSettings, content: str) -> dict:
    """Keyword arguments of ``client.chat.completions.create`` for one judge prompt."""
    request = {"model": settings.model, "messages": [{"role": "user", "content": content}],
               "temperature": settings.temperature, "max_tokens": settings.max_tokens}
    if settings.constrain == "logit_bias":
        request.update(max_tokens=1, logit_bias={str(i): settings.logit_bias for i in settings.verdict_token_ids})
    elif settings.constrain == "logprobs":
        request.update(max_tokens=1, logprobs=True, top_logprobs=settings.top_logprobs)
    return request


def pair_requests(task: JudgeTask, settings: JudgeSettings, prompt: str, first: str, second: str
                  ) -> List[Tuple[Tuple[str, ...], dict]]:
    """(criteria answered, request) for one presented pair: one F.1 request covering every criterion, or one
    single-character request per criterion when the verdict is constrained."""
    if settings.constrain == "none":
        return [(task.criteria, chat_request(settings, render(task, prompt, first, second)))]
    return [((criterion,), chat_request(settings, render_single_char(task, criterion, prompt, first, second)))
            for criterion in task.criteria]


def read_verdicts(task: JudgeTask, settings: JudgeSettings, criteria: Sequence[str], completion: Mapping
                  ) -> Dict[str, Optional[str]]:
    """Criterion → presented letter for one completion (``{"text", "top_logprobs", "model"}``).

    ``--constrain logprobs`` against a server that ignores ``logprobs`` (``transformers serve`` does) is an
    error, not a silent fall-back to the greedy first token."""
    if settings.constrain == "none":
        return parse_answer(task, completion["text"])
    if settings.constrain == "logprobs":
        if not completion.get("top_logprobs"):
            raise ValueError(f"--constrain logprobs: the judge {completion.get('model') or settings.model} returned "
                             "no top_logprobs (the server ignores 'logprobs'); use --constrain logit_bias")
        letter = letter_from_top_logprobs(completion["top_logprobs"])
    else:
        letter = parse_letter(completion["text"])
    return {criterion: letter for criterion in criteria}


# ------------------------------------------------------------------------------ client: cache + retries
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


# --------------------------------------------------------------------------------------- pairs + tally
@dataclass(frozen=True)
class ResponsePair:
    prompt: str
    response_a: str
    response_b: str


@dataclass
class PairJudgement:
    """One judged pair: whether it was shown swapped, each criterion's outcome for file A ("a", "b", "tie",
    "unparseable") and the judge's raw answers."""

    index: int
    prompt: str
    swapped: bool
    outcomes: Dict[str, str]
    judge_answers: List[str] = field(default_factory=list)
    judge_models: List[str] = field(default_factory=list)


def judge_pair(index: int, pair: ResponsePair, task: JudgeTask, settings: JudgeSettings,
               client: CachedJudgeClient, seed: int) -> PairJudgement:
    swapped = presentation_swapped(seed, index, pair.prompt)
    first, second = (pair.response_b, pair.response_a) if swapped else (pair.response_a, pair.response_b)
    outcomes: Dict[str, str] = {}
    answers: List[str] = []
    models: List[str] = []
    for criteria, request in pair_requests(task, settings, pair.prompt, first, second):
        completion = client.complete(request)
        answers.append(completion["text"])
        if completion.get("model") and completion["model"] not in models:
            models.append(completion["model"])
        for criterion, letter in read_verdicts(task, settings, criteria, completion).items():
            outcomes[criterion] = undo_order(letter, swapped)
    return PairJudgement(index, pair.prompt, swapped, outcomes, answers, models)


def answering_model(judgements: Sequence[PairJudgement], requested: str) -> str:
    """The name of the model(s) that answered (sorted, '+'-joined when several did), or ``requested`` marked
    as unconfirmed when no response recorded one (completions cached before this was recorded)."""
    models = sorted({m for j in judgements for m in j.judge_models})
    return "+".join(models) if models else f"{requested} (unconfirmed: no response named its model)"


def judge_label(model: str) -> str:
    """A short name for a judge model: the last folder of a path (``transformers serve`` names a local model by its
    directory, e.g. ``~/.cache/ma-rlhf/smollm2-135m-instruct``), each of several '+'-joined names alike."""
    return "+".join(os.path.basename(os.path.normpath(name)) if os.sep in name and os.path.isabs(name)
                    else name for name in model.split("+"))


def shown_position(outcome: str, swapped: bool) -> Optional[str]:
    """The letter the judge gave (``A`` = the response shown first, ``B`` second, ``E`` a tie), from a pair's
    outcome and presentation order (the inverse of :func:`undo_order`); None when unparseable."""
    if outcome == UNPARSEABLE:
        return None
    if outcome == TIE:
        return "E"
    return "A" if (outcome == PREFER_A) != swapped else "B"


POSITION_BIAS_SHARE = 0.9
"""A judge that gives one letter for at least this share of the parsed pairs is reported as answering by position
(the order is randomised per pair, so a content-following judge gives each position about half the wins)."""


def position_bias_line(judgements: Sequence["PairJudgement"], criterion: str) -> Optional[str]:
    """A warning when the judge gave the same letter for every parseable pair, or nearly (at least
    :data:`POSITION_BIAS_SHARE` of them; e.g. always ``A``, the response shown first): it then answers by position,
    not by content, and the win rates only echo the presentation order; None otherwise."""
    letters = [shown_position(j.outcomes[criterion], j.swapped) for j in judgements]
    parsed = [letter for letter in letters if letter is not None]
    if len(parsed) < 2:
        return None
    letter, count = Counter(parsed).most_common(1)[0]
    if count < POSITION_BIAS_SHARE * len(parsed):
        return None
    where = {"A": "the response shown first", "B": "the response shown second", "E": "a tie"}[letter]
    share = f"all {len(parsed)}" if count == len(parsed) else f"{count} of {len(parsed)}"
    return (f"warning: position bias: the judge answered {letter} ({where}) for {share} parsed pairs, "
            f"whatever the responses; these rates reflect the presentation order, not quality")


def judge_pairs(pairs: Sequence[ResponsePair], task: JudgeTask, settings: JudgeSettings,
                client: CachedJudgeClient, seed: int = 1234, concurrency: int = 8,
                progress: bool = False) -> List[PairJudgement]:
    """Judge every pair with at most ``concurrency`` requests in flight; results in input order."""
    from tqdm.auto import tqdm

    if pairs:  # the first pair alone: a wrong model or server fails on one request, before the others are sent
        judge_pair(0, pairs[0], task, settings, client, seed)  # cached: the pool below reads it back
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = [pool.submit(judge_pair, i, pair, task, settings, client, seed) for i, pair in enumerate(pairs)]
        return [future.result() for future in tqdm(futures, desc="judge", disable=not progress)]


@dataclass(frozen=True)
class Tally:
    """Win / tie / loss of file A against file B on one criterion. Rates are over the parseable verdicts."""

    win: int
    tie: int
    loss: int
    unparseable: int

    @property
    def judged(self) -> int:
        return self.win + self.tie + self.loss

    def rate(self, count: int) -> Optional[float]:
        """``count`` over the parseable verdicts; None when every verdict was unparseable."""
        return count / self.judged if self.judged else None

    def as_dict(self) -> dict:
        return {**asdict(self), "win_rate": self.rate(self.win), "tie_rate": self.rate(self.tie),
                "loss_rate": self.rate(self.loss)}


def tally(outcomes: Sequence[str]) -> Tally:
    return Tally(win=outcomes.count(PREFER_A), tie=outcomes.count(TIE), loss=outcomes.count(PREFER_B),
                 unparseable=outcomes.count(UNPARSEABLE))


def tally_by_criterion(judgements: Sequence[PairJudgement], criteria: Sequence[str]) -> Dict[str, Tally]:
    return {c: tally([j.outcomes[c] for j in judgements]) for c in criteria}


# ------------------------------------------------------------------------------------------------ I/O
def read_response_rows(path: str) -> List[dict]:
    """Rows of a response JSONL file, each with string "prompt" and "response"."""
    rows = []
    for number, row in read_jsonl(path):
        for key in ("prompt", "response"):
            if not isinstance(row, dict) or not isinstance(row.get(key), str):
                raise ValueError(f"{path} row {number}: needs a string {key!r}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def align_by_prompt(rows_a: Sequence[dict], rows_b: Sequence[dict], name_a: str = "--a",
                    name_b: str = "--b") -> List[ResponsePair]:
    """Pair the k-th occurrence of each prompt in ``rows_a`` with its k-th occurrence in ``rows_b``, in A's
    order; any row of either file without a partner is an error naming its row."""
    waiting: Dict[str, deque] = defaultdict(deque)
    for number, row in enumerate(rows_b, 1):
        waiting[row["prompt"]].append((number, row["response"]))
    pairs = []
    for number, row in enumerate(rows_a, 1):
        if not waiting[row["prompt"]]:
            raise ValueError(f"{name_a} row {number}: no response to this prompt in {name_b} (files misaligned)")
        pairs.append(ResponsePair(row["prompt"], row["response"], waiting[row["prompt"]].popleft()[1]))
    leftover = sorted(number for queue in waiting.values() for number, _ in queue)
    if leftover:
        raise ValueError(f"{name_b} row {leftover[0]}: no response to this prompt in {name_a} (files misaligned)")
    return pairs


def verdict_token_ids_from_tokenizer(name_or_path: str) -> Tuple[int, ...]:
    """Ids of "A", "B", "E" (and " A", " B", " E" where those are single tokens) in the judge's tokenizer."""
    from transformers import AutoTokenizer

    from dschat.model.loading import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path))
    ids = []
    for text in (*LETTERS, *(" " + letter for letter in LETTERS)):
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) == 1:
            ids.append(encoded[0])
    return tuple(ids)


def _percent(rate: Optional[float]) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def summary_table(tallies: Mapping[str, Tally], name_a: str, name_b: str) -> str:
    """Counts and rates per criterion; rates read "n/a" where no verdict could be parsed."""
    header = f"{'criterion':<20} {'win':>5} {'tie':>5} {'loss':>5} {'unparsed':>9} {'win%':>7} {'tie%':>7} {'loss%':>7}"
    lines = [f"{name_a} (A) vs {name_b} (B)", header]
    for criterion, t in tallies.items():
        lines.append(f"{criterion:<20} {t.win:>5} {t.tie:>5} {t.loss:>5} {t.unparseable:>9} "
                     f"{_percent(t.rate(t.win)):>7} {_percent(t.rate(t.tie)):>7} {_percent(t.rate(t.loss)):>7}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--task", choices=sorted(TASKS), default=None,
                        help="F.1 prompt to use (required unless --judge_prompt)")
    parser.add_argument("--judge_prompt", default=None, metavar="FILE",
                        help="your own task's judge prompt instead: a text file with {prompt}, {response_a} and "
                             "{response_b}, asking for one character, A, B or E (tie); reported as 'overall'")
    parser.add_argument("--a", required=True, help="JSONL of the method being evaluated (prompt, response)")
    parser.add_argument("--b", required=True, help="JSONL of the baseline it is compared with")
    parser.add_argument("--name_a", default=None, help="label of --a (default: its file name)")
    parser.add_argument("--name_b", default=None, help="label of --b (default: its file name)")
    parser.add_argument("--limit", type=int, default=0, help="judge only the first N pairs (paper: 50); 0 = all")
    parser.add_argument("--model", default="gpt-4o", help="judge model (paper: gpt-4o-2024-05-13)")
    parser.add_argument("--base_url", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--api_key", default=None,
                        help="default: $OPENAI_API_KEY, or a placeholder when --base_url is given")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max_tokens", type=int, default=256, help="answer length for unconstrained judges")
    parser.add_argument("--constrain", choices=CONSTRAIN_MODES, default="none",
                        help="small judges: force a one-token A/B/E verdict (logit_bias) or read it off the "
                             "first token's top log-probabilities (logprobs)")
    parser.add_argument("--verdict_token_ids", default=None,
                        help="comma-separated ids of the A/B/E tokens for --constrain logit_bias")
    parser.add_argument("--judge_tokenizer", default=None,
                        help="HF tokenizer (path or model name) to look the A/B/E ids up instead")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the presentation order")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--max_retries", type=int, default=5, help="retries per request (exponential backoff)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    parser.add_argument("--cache", default="outputs/judge_cache/completions.jsonl",
                        help="JSONL completion cache ('' to disable)")
    parser.add_argument("--output", default=None, help="write one JSONL verdict record per pair here")
    parser.add_argument("--summary", default=None, help="write the win/tie/loss counts and rates as JSON here")
    parser.add_argument("--max_unparseable", type=float, default=0.2,
                        help="largest fraction of pairs whose answer may not parse, on any criterion (default 0.2); "
                             "above it the table and --output (the judge's raw answers) are written, --summary is "
                             "not, and the run ends with a one-line error (exit 2): the judge or its prompt is wrong")
    parser.add_argument("--no_progress_bar", action="store_true")
    return parser


def make_openai_client(base_url: Optional[str], api_key: Optional[str], timeout: float):
    import openai

    key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
    if key is None:
        raise ValueError("no API key: set OPENAI_API_KEY or pass --api_key (or --base_url for a local server)")
    return openai.OpenAI(api_key=key, base_url=base_url, timeout=timeout, max_retries=0)


def custom_task(path: str) -> JudgeTask:
    """The judge task of ``--judge_prompt FILE``: its text with the three placeholders, one-character answers."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError as err:
        raise ValueError(f"--judge_prompt {path}: cannot read it ({err.strerror})") from None
    missing = [name for name in ("prompt", "response_a", "response_b") if "{" + name + "}" not in text]
    if missing:
        raise ValueError(f"--judge_prompt {path}: no {', '.join('{' + m + '}' for m in missing)} in it (expected "
                         "{prompt}, {response_a} and {response_b}; write other braces as {{ and }})")
    try:
        text.format(prompt="", response_a="", response_b="")
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"--judge_prompt {path}: unexpected placeholder {err} (only {{prompt}}, {{response_a}} "
                         "and {response_b}; write other braces as {{ and }})") from None
    name = os.path.splitext(os.path.basename(path))[0]
    return JudgeTask(name, text, SINGLE_CHAR, ("overall",), "overall")


def output_files_ready(*paths: Optional[str]) -> None:
    """Check, before the first request, that the files the run will write can be: a path that cannot be written
    is one line now, not a traceback after the work is done. Nothing is created (a failed run leaves no empty
    folder); :func:`write_text` makes the folders when there is something to write."""
    for path in filter(None, paths):
        if os.path.isdir(path):
            raise ValueError(f"{path} is a directory (expected a file path)")
        folder = os.path.dirname(os.path.abspath(path))
        existing = folder
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise ValueError(f"{path}: cannot create its folder {folder} ({existing} is a file)")
        if not os.access(existing, os.W_OK):
            raise ValueError(f"{path}: its folder {folder} cannot be written ({existing} is not writable)")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path``, making its folder first."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def unparseable_error(tallies: Mapping[str, Tally], limit: float, output: Optional[str]) -> Optional[str]:
    """The one-line error when the judge's answers did not parse for more than ``limit`` of the pairs on some
    criterion (the worst one named), else None."""
    worst = max(tallies, key=lambda c: tallies[c].unparseable / max(1, tallies[c].judged + tallies[c].unparseable))
    t = tallies[worst]
    pairs = t.judged + t.unparseable
    if not pairs or t.unparseable / pairs <= limit:
        return None
    where = f"its raw answers are in {output}" if output else "rerun with --output FILE to see its raw answers"
    return (f"the judge's answers did not parse for {t.unparseable} of {pairs} pairs on {worst} "
            f"({t.unparseable / pairs:.0%} > --max_unparseable {limit:g}): the judge model or its prompt is wrong "
            f"for this task; {where}; no --summary written")


def server_error(err: BaseException, args) -> ValueError:
    """One line for an API error that retries did not cure (a wrong --model, --base_url or key)."""
    where = args.base_url or "the OpenAI API"
    if connection_refused(err):
        return ValueError(f"judge server {where}: connection refused (nothing listens there: start the server, or "
                          "check --base_url)")
    status = getattr(err, "status_code", None)
    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    if status is not None:
        return ValueError(f"judge server {where} answered HTTP {status} to --model {args.model} on the first "
                          f"request: {detail}")
    return ValueError(f"judge server {where}: {detail} (after {args.max_retries} retries)")


def run(args) -> Tuple[Dict[str, Tally], List[PairJudgement], CachedJudgeClient]:
    task = args.task_spec
    token_ids: Tuple[int, ...] = ()
    if args.verdict_token_ids:
        token_ids = tuple(int(x) for x in args.verdict_token_ids.split(","))
    elif args.judge_tokenizer:
        token_ids = verdict_token_ids_from_tokenizer(args.judge_tokenizer)
    settings = JudgeSettings(model=args.model, temperature=args.temperature, max_tokens=args.max_tokens,
                             constrain=args.constrain, verdict_token_ids=token_ids)
    pairs = align_by_prompt(read_response_rows(args.a), read_response_rows(args.b), args.a, args.b)
    pairs = pairs[:args.limit] if args.limit else pairs
    client = CachedJudgeClient(make_openai_client(args.base_url, args.api_key, args.timeout), args.cache or None,
                               max_retries=args.max_retries)
    import openai

    try:
        judgements = judge_pairs(pairs, task, settings, client, seed=args.seed, concurrency=args.concurrency,
                                 progress=not args.no_progress_bar)
    except openai.APIError as err:
        raise server_error(err, args) from None
    return tally_by_criterion(judgements, task.criteria), judgements, client


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    name_a = args.name_a or os.path.splitext(os.path.basename(args.a))[0]
    name_b = args.name_b or os.path.splitext(os.path.basename(args.b))[0]
    try:
        if (args.task is None) == (args.judge_prompt is None):
            raise ValueError("give one of --task (the paper's prompts) or --judge_prompt FILE (your own)")
        args.task_spec = custom_task(args.judge_prompt) if args.judge_prompt else get_task(args.task)
        output_files_ready(args.output, args.summary)
        tallies, judgements, client = run(args)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    answered = answering_model(judgements, args.model)
    label = judge_label(answered)
    asked = "" if answered == args.model else f" (asked for {judge_label(args.model)})"
    task = args.task_spec
    print(f"judge {label}{asked} on {task.name}: {len(judgements)} pairs, order seed {args.seed}, "
          f"{client.api_calls} API calls (the rest from the cache)")
    print(summary_table(tallies, name_a, name_b))
    bias = position_bias_line(judgements, task.headline)
    if bias:
        print(bias)
    if args.output:
        write_text(args.output, "".join(
            json.dumps({"index": j.index, "prompt": j.prompt, "swapped": j.swapped,
                        "verdict": j.outcomes[task.headline], "criteria": j.outcomes,
                        "judge_answers": j.judge_answers, "judge_model": "+".join(j.judge_models) or None}) + "\n"
            for j in judgements))
    failed = unparseable_error(tallies, args.max_unparseable, args.output)
    if failed:
        print(f"error: {failed}", file=sys.stderr)
        sys.exit(2)
    if args.summary:
        write_text(args.summary, json.dumps(
            {"task": task.name, "model": label, "model_id": answered, "requested_model": args.model,
             "position_bias": bias is not None, "position_bias_line": bias, "a": name_a, "b": name_b,
             "pairs": len(judgements), "headline": task.headline,
             "criteria": {c: t.as_dict() for c, t in tallies.items()}}, indent=2))


if __name__ == "__main__":
    main()
