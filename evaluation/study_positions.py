"""Where in the response each policy changed (the study's long task): the early decision and the rest.

    python -m evaluation.study_positions --out outputs/study --report_dir docs/study

The long task's responses open with a stance-setting sentence 100+ tokens before the reward
(:mod:`dschat.utils.data.synthetic_long_task`). The credit-assignment argument (§3.2.3) predicts that MA-PPO
moves early decisions more than token-level PPO with λ < 1. For the SFT policy and the final actor of every
finished long-task run of the arms in ``--arms`` (default: token PPO's λ sweep, MA-PPO n = 5 and the entropy
rule) this samples one response per held-out prompt (128, T = 0.8, a fixed seed: the same noise
for every policy) and measures: the opening sentence's sentiment (+1 / 0 / -1 by its sentiment words), and
the gold score of the first and of the last third of the sentences. One line per policy goes to
``REPORT_DIR/positions.jsonl``; the report (:mod:`evaluation.study_report`) tabulates it per arm.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Sequence

import torch

from dschat.utils.data.synthetic_task import NEGATIVE_WORDS, POSITIVE_WORDS, WORD, synthetic_gold_score
from evaluation.study import LAMBDA_SWEEP
from dschat.utils.cli import ArgumentParser

SEED = 4321
PROMPTS = 128
SENTENCE = re.compile(r"[^.]+\.?")


def sentence_sentiment(sentence: str) -> int:
    """+1, 0 or -1: the sign of (positive - negative words) of one sentence."""
    words = WORD.findall(sentence.lower())
    score = sum(w in POSITIVE_WORDS for w in words) - sum(w in NEGATIVE_WORDS for w in words)
    return (score > 0) - (score < 0)


def position_profile(text: str) -> Dict[str, float]:
    """The opening sentence's sentiment and the gold score of the first and last third of the sentences."""
    sentences = [s for s in SENTENCE.findall(text) if s.strip()]
    if not sentences:
        return {"opening": 0.0, "first_third": 0.0, "last_third": 0.0}
    third = max(1, len(sentences) // 3)
    return {"opening": float(sentence_sentiment(sentences[0])),
            "first_third": synthetic_gold_score(" ".join(sentences[:third])),
            "last_third": synthetic_gold_score(" ".join(sentences[-third:]))}


def mean_profile(texts: Sequence[str]) -> Dict[str, float]:
    profiles = [position_profile(t) for t in texts]
    return {key: sum(p[key] for p in profiles) / len(profiles) for key in profiles[0]}


@torch.no_grad()
def sample_responses(model_dir: Path, prompts: Sequence[str], max_new_tokens: int = 136) -> List[str]:
    from transformers import AutoModelForCausalLM

    from dschat.rlhf.experience import SamplingConfig, decode_responses, generate, rollout_masks
    from dschat.utils.data import PromptCollator, PromptDataset
    from dschat.utils.model import load_tokenizer
    from dschat.utils.seeding import seeded_rng

    tokenizer = load_tokenizer(str(model_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    dataset = PromptDataset(prompts, tokenizer, 64)
    batch = PromptCollator.for_tokenizer(tokenizer)([dataset[i] for i in range(len(dataset))])

    class Engine:  # what generate() reads of a DeepSpeed engine
        module = model

        @staticmethod
        def zero_optimization_stage():
            return 0

    with seeded_rng(SEED):
        seq = generate(Engine, batch["input_ids"], batch["attention_mask"],
                       SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.8, top_k=50, top_p=1.0),
                       tokenizer.pad_token_id, tokenizer.eos_token_id)
    _, action_mask = rollout_masks(seq, batch["attention_mask"], tokenizer.eos_token_id)
    return decode_responses(tokenizer, seq, action_mask)


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("outputs/study"), help="the study's runs")
    parser.add_argument("--report_dir", type=Path, default=Path("docs/study"))
    parser.add_argument("--arms", nargs="+", default=[*LAMBDA_SWEEP, "mappo", "mappo-entropy"],
                        help="the long-task arms whose final actors are measured")
    args = parser.parse_args(argv)
    from dschat.utils.data import load_pairs

    prompts = [pair.prompt for pair in load_pairs("synthetic-long", "validation")[:PROMPTS]]
    policies = [("sft", 0, args.out / "long" / "sft")]
    for marker in sorted((args.out / "long").glob("*/seed*/study_run.json")):
        if marker.parent.parent.name in args.arms:
            policies.append((marker.parent.parent.name, int(marker.parent.name[4:]), marker.parent / "actor"))
    path = args.report_dir / "positions.jsonl"
    done = {}
    if path.is_file():
        done = {(r["arm"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines())}
    args.report_dir.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for arm, seed, model_dir in policies:
            record = done.get((arm, seed))
            if record is None:
                record = {"arm": arm, "seed": seed, **{k: round(v, 5) for k, v in
                                                        mean_profile(sample_responses(model_dir, prompts)).items()}}
                print(json.dumps(record), flush=True)
            handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
