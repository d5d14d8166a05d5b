"""Throughput of the parsing-based termination (paper §3.2.1, Appendix B.4) on CPU: responses per second for
text (spaCy phrase trees) and code (Python statement trees), end to end through ``parsing_segments`` on
batches (decode + char alignment + parse + DFS + segment ids), with the alignment and parse times split out.

Responses are generated from a seeded grammar: summaries of 3-6 sentences (~60-110 words) and Python
solutions of ~10-30 lines, so the figures are reproducible without any dataset.

    python scripts/benchmarks/bench_parsing.py [--responses 200] [--batch-size 16] [--tokenizer PATH]
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Callable, List

import torch

from dschat.rlhf.macro_action.parsers import get_tree_provider
from dschat.rlhf.macro_action.parsers.alignment import text_decoder, token_pieces
from dschat.rlhf.macro_action.termination.parsing import parsing_segments

DEFAULT_TOKENIZER = Path(__file__).resolve().parents[2] / "dschat" / "assets" / "tokenizer"

SUBJECTS = ["my cat", "the new manager", "our landlord", "a friend of mine", "the team", "my sister", "I"]
VERBS = ["moved to", "complained about", "kept ignoring", "finally fixed", "wants to celebrate", "worried about"]
OBJECTS = ["the old apartment", "a long run in the rain", "the broken heater", "her birthday party",
           "the weekly meeting", "some people from work", "a surprise trip to Europe"]
TAILS = ["but nothing seems to work", "because it was late", "and I am not sure why", "so I need advice",
         "although everyone said it was fine", "which made things worse"]


def text_response(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(3, 6)):
        words = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        if rng.random() < 0.7:
            words += f", {rng.choice(TAILS)}"
        sentences.append(words[0].upper() + words[1:] + rng.choice([".", ".", "?", "!"]))
    return " ".join(sentences)


def code_response(rng: random.Random) -> str:
    lines = ["def solve(n, values):", "    total = 0", "    best = [0] * (n + 1)"]
    for index in range(rng.randint(2, 6)):
        kind = rng.choice(["for", "if", "while", "assign"])
        if kind == "for":
            lines += ["    for i in range(len(values)):", f"        best[i % n] += values[i] * {index + 1}"]
        elif kind == "if":
            lines += [f"    if total > {index}:", "        total -= best[0]", "    else:",
                      f"        total += max(values[:{index + 2}])"]
        elif kind == "while":
            lines += ["    while total > 100:", "        total //= 2  # keep it small"]
        else:
            lines += [f"    step_{index} = sum(best) - min(values) + {index}"]
    lines += ["    return total + max(best)", "", "n = int(input())", "print(solve(n, list(range(n))))"]
    return "\n".join(lines) + "\n"


def batches(tokenizer, texts: List[str], batch_size: int):
    """Right-padded ``(ids [B, T], action_mask [B, T])`` batches of the texts as responses."""
    for start in range(0, len(texts), batch_size):
        rows = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts[start:start + batch_size]]
        width = max(len(row) for row in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for row, row_ids in enumerate(rows):
            ids[row, :len(row_ids)] = torch.tensor(row_ids)
            mask[row, :len(row_ids)] = True
        yield ids, mask


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def bench(name: str, parser: str, texts: List[str], tokenizer, batch_size: int, cutoff: int) -> None:
    provider = get_tree_provider(parser)
    prepared = list(batches(tokenizer, texts, batch_size))
    provider.parse_many(texts[:2])  # warm-up (lazy imports)
    tokens = sum(int(mask.sum()) for _, mask in prepared)
    fallbacks = []
    total = timed(lambda: fallbacks.extend(int(parsing_segments(ids, mask, tokenizer, provider, cutoff)
                                               .fallback.sum()) for ids, mask in prepared))
    decode = text_decoder(tokenizer)
    all_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    align = timed(lambda: [token_pieces(ids, decode) for ids in all_ids])
    parse = timed(lambda: provider.parse_many(texts))
    print(f"{name:5s} parser={provider.name:6s} {len(texts)} responses, {tokens / len(texts):.0f} tokens each: "
          f"{len(texts) / total:7.1f} responses/s end to end (alignment {align / len(texts) * 1e3:.2f} ms, "
          f"parse {parse / len(texts) * 1e3:.2f} ms per response; fallbacks {sum(fallbacks)})")


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=200, help="responses per kind (default 200)")
    parser.add_argument("--batch-size", type=int, default=16, help="responses per parsing_segments call")
    parser.add_argument("--cutoff", type=int, default=5, help="C of the parsing rule (paper: 5)")
    parser.add_argument("--tokenizer", default=str(DEFAULT_TOKENIZER), help="policy tokenizer path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args()
    if not Path(args.tokenizer).is_dir():
        parser.error(f"no tokenizer at {args.tokenizer}: pass --tokenizer PATH")
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    rng = random.Random(args.seed)
    bench("text", "spacy", [text_response(rng) for _ in range(args.responses)], tokenizer, args.batch_size,
          args.cutoff)
    bench("code", "code", [code_response(rng) for _ in range(args.responses)], tokenizer, args.batch_size,
          args.cutoff)


if __name__ == "__main__":
    main()
