"""Where in the response each policy changed (the study's long task): the early decision and the rest, and the gold
score with and without length's share.

    python -m evaluation.study_positions --out outputs/study --report_dir docs/study [--sample_seeds 4321 1 2]

The long task's responses open with a stance-setting sentence 100+ tokens before the reward
(:mod:`dschat.data.synthetic_long_task`). The credit-assignment argument (§3.2.3) predicts that MA-PPO
moves early decisions more than token-level PPO with λ < 1. For the SFT policy and the final actor of every
finished long-task run of the arms in ``--arms`` (default: every long-task arm) this samples one response per
held-out prompt (128, T = 0.8, a fixed sampling seed: the same noise for every policy; ``--sample_seeds`` adds
draws with other seeds) and measures: the opening sentence's sentiment (+1 / 0 / -1 by its sentiment words), the
gold score of the first and of the last third of the sentences, the gold score of the whole response and of its
first :data:`FIRST_K` sentences. The gold score is a ratio of sentiment words to all words, and this task's
opening sentences carry more sentiment than the rest, so a shorter response scores higher with nothing else
changed: the held-out chosen responses (the ``chosen`` line, no sampling) score higher on their first sentences
than whole. The first-k gold compares policies on the same number of sentences.

One line per (policy, sampling seed) goes to ``REPORT_DIR/positions.jsonl``; lines already there are kept (a
policy is sampled once), so the file can grow across machines. The report (:mod:`evaluation.study.report`)
tabulates it per arm.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Sequence

import torch

from dschat.core.entrypoint import ArgumentParser
from dschat.data.synthetic_task import NEGATIVE_WORDS, POSITIVE_WORDS, WORD, synthetic_gold_score
from evaluation.study.design import ARMS


SEED = 4321


PROMPTS = 128


FIRST_K = (3, 10)
"""The length-controlled gold scores: of the first 3 and the first 10 sentences (a response has 19-22 at the SFT
policy; most final actors keep more than 10)."""


SENTENCE = re.compile(r"[^.]+\.?")


def sentence_sentiment(sentence: str) -> int:
    """+1, 0 or -1: the sign of (positive - negative words) of one sentence."""
    words = WORD.findall(sentence.lower())
    score = sum(w in POSITIVE_WORDS for w in words) - sum(w in NEGATIVE_WORDS for w in words)
    return (score > 0) - (score < 0)


def position_profile(text: str) -> Dict[str, float]:
    """The opening sentence's sentiment, the gold score of the first and last third of the sentences, of the whole
    text and of its first k sentences (k in :data:`FIRST_K`), and the number of sentences."""
    sentences = [s for s in SENTENCE.findall(text) if s.strip()]
    if not sentences:
        return {"opening": 0.0, "first_third": 0.0, "last_third": 0.0, "gold": 0.0,
                **{f"gold_first{k}": 0.0 for k in FIRST_K}, "sentences": 0.0}
    third = max(1, len(sentences) // 3)
    return {"opening": float(sentence_sentiment(sentences[0])),
            "first_third": synthetic_gold_score(" ".join(sentences[:third])),
            "last_third": synthetic_gold_score(" ".join(sentences[-third:])),
            "gold": synthetic_gold_score(text),
            **{f"gold_first{k}": synthetic_gold_score(" ".join(sentences[:k])) for k in FIRST_K},
            "sentences": float(len(sentences))}


def mean_profile(texts: Sequence[str]) -> Dict[str, float]:
    profiles = [position_profile(t) for t in texts]
    return {key: sum(p[key] for p in profiles) / len(profiles) for key in profiles[0]}


@torch.no_grad()
def sample_responses(model_dir: Path, prompts: Sequence[str], max_new_tokens: int = 136, seed: int = SEED
                     ) -> List[str]:
    from transformers import AutoModelForCausalLM

    from dschat.rlhf.experience import SamplingConfig, decode_responses, rollout_masks
    from dschat.rlhf.rollout import PlainModel
    from dschat.rlhf.rollout.hf import generate
    from dschat.data import PromptCollator, PromptDataset
    from dschat.model import load_tokenizer
    from dschat.core.seeding import seeded_rng

    tokenizer = load_tokenizer(str(model_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    dataset = PromptDataset(prompts, tokenizer, 64)
    batch = PromptCollator.for_tokenizer(tokenizer)([dataset[i] for i in range(len(dataset))])


    with seeded_rng(seed):
        seq = generate(PlainModel(model), batch["input_ids"], batch["attention_mask"],
                       SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.8, top_k=50, top_p=1.0),
                       tokenizer.pad_token_id, tokenizer.eos_token_id)
    _, action_mask = rollout_masks(seq, batch["attention_mask"], tokenizer.eos_token_id)
    return decode_responses(tokenizer, seq, action_mask)


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("outputs/study"), help="the study's runs")
    parser.add_argument("--report_dir", type=Path, default=Path("docs/study"))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), metavar="ARM",
                        help="the long-task arms whose final actors are measured (default: all)")
    parser.add_argument("--sample_seeds", nargs="+", type=int, default=[SEED],
                        help="sampling seeds, one draw of the 128 prompts each (the first is the report's)")
    args = parser.parse_args(argv)
    from dschat.data import load_pairs

    pairs = load_pairs("synthetic-long", "validation")[:PROMPTS]
    prompts = [pair.prompt for pair in pairs]
    policies = [("sft", 0, args.out / "long" / "sft")]
    for marker in sorted((args.out / "long").glob("*/seed*/study_run.json")):
        if marker.parent.parent.name in args.arms:
            policies.append((marker.parent.parent.name, int(marker.parent.name[4:]), marker.parent / "actor"))
    path = args.report_dir / "positions.jsonl"
    records = {}
    if path.is_file():
        for record in map(json.loads, path.read_text().splitlines()):
            records[record["arm"], record["seed"], record.get("sample_seed", SEED)] = record
    chosen = {"arm": "chosen", "seed": 0, "sample_seed": None,
              **{k: round(v, 5) for k, v in mean_profile([pair.chosen for pair in pairs]).items()}}
    records["chosen", 0, None] = chosen
    args.report_dir.mkdir(parents=True, exist_ok=True)

    def write():
        path.write_text("".join(json.dumps(r) + "\n" for r in records.values()))

    for sample_seed in args.sample_seeds:
        for arm, seed, model_dir in policies:
            key = (arm, seed, sample_seed)
            if key in records and "gold" in records[key] and model_dir.is_dir():
                continue
            if not model_dir.is_dir():
                continue  # measured on another machine: its line is kept as it is
            profile = mean_profile(sample_responses(model_dir, prompts, seed=sample_seed))
            records[key] = {"arm": arm, "seed": seed, "sample_seed": sample_seed,
                            **{k: round(v, 5) for k, v in profile.items()}}
            print(json.dumps(records[key]), flush=True)
            write()
    write()
