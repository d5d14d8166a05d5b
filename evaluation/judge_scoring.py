"""Judging pairs: the presentation order drawn per pair and undone (paper §4.1, "randomizing the order of
responses"), one pair's requests and verdicts, the pool that judges them all, the win / tie / loss tally per
criterion, and the position-bias check."""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

from evaluation.judge_client import CachedJudgeClient
from evaluation.judge_prompts import JudgeTask
from evaluation.judge_requests import JudgeSettings, pair_requests, read_verdicts, reasoning_request

PREFER_A, PREFER_B, TIE, UNPARSEABLE = "a", "b", "tie", "unparseable"


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

    def ask(request: dict) -> dict:
        completion = client.complete(request)
        answers.append(completion["text"])
        if completion.get("model") and completion["model"] not in models:
            models.append(completion["model"])
        return completion

    first_answer = reasoning_request(task, settings, pair.prompt, first, second)
    reasoning = ask(first_answer)["text"] if first_answer is not None else None
    for criteria, request in pair_requests(task, settings, pair.prompt, first, second, reasoning):
        completion = ask(request)
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

