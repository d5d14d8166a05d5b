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
criterion (``evaluation.judge_prompts.render_single_char``), or with ``--reason_first`` ask it after the judge's
free answer to the F.1 prompt itself (docs: "Reading the verdict").

This module is the command line; the pieces, one concept each: ``judge_prompts`` (the F.1 text),
``judge_requests`` (what is sent, how a verdict is read), ``judge_parse`` (free-text answers), ``judge_client``
(HTTP, retries, cache) and ``judge_scoring`` (order, pairs, tallies).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict, deque
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from dschat.core.entrypoint import ArgumentParser
from evaluation.jsonl import read_jsonl
from evaluation.judge_client import CachedJudgeClient, connection_refused, make_openai_client
from evaluation.judge_prompts import SINGLE_CHAR, TASKS, JudgeTask, get_task
from evaluation.judge_requests import CONSTRAIN_MODES, JudgeSettings, verdict_token_ids_from_tokenizer
from evaluation.judge_scoring import PairJudgement, ResponsePair, Tally, answering_model, judge_label, judge_pairs, \
    position_bias_line, tally_by_criterion


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
    parser.add_argument("--reason_first", action="store_true",
                        help="with --constrain: send the paper's F.1 prompt first and let the judge answer freely (its "
                             "comparison and reasons, as in the paper), then ask each criterion's one-token verdict "
                             "after that answer; HH-RLHF and WebGPT (TL;DR's F.1 prompt already asks for one character)")
    parser.add_argument("--verdict_token_ids", default=None,
                        help="comma-separated ids of the A/B/E tokens for --constrain logit_bias")
    parser.add_argument("--judge_tokenizer", default=None,
                        help="HF tokenizer (path or model name), or the .gguf file a llama.cpp server serves, "
                             "to look the A/B/E ids up instead")
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
                             constrain=args.constrain, verdict_token_ids=token_ids, reason_first=args.reason_first)
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
