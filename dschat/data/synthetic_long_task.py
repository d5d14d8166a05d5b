"""The embedded long-response task (``--data_name synthetic-long``): credit assignment over 100+ tokens.

Why. The paper's argument for macro actions (§3.2.3, Fig. 11) is a shorter credit-assignment distance: with
γ = 1 and λ < 1 the final reward reaches a token ``d`` steps before the end with weight λ^d, and ``d`` counts
macro steps under MA-PPO. The short ``synthetic`` task (~16 tokens, ~3 macros) cannot show that; this one can.

Task. The prompts of the short task, asking for a *detailed* review. A response is 19-22 sentences (about
100-130 tokens of the shipped tokenizer, so 20+ macros at n = 5), each carrying one sentiment slot::

     Overall it felt great. The price was lovely. I found the staff okay. ... The lamp is really awful.

The first sentence sets a *stance* (its sentiment); every later slot repeats the stance with probability
:data:`STANCE_FOLLOW`, else is drawn uniformly. So the decision made first (the opening sentiment word, 100+
tokens before the reward) shifts the expected sentiment of the whole response, and the remaining decisions are
spread evenly through it. A pair shares one skeleton and differs in the two sentiment draws (stance included);
ties in the sentiment sum are redrawn and the higher sum is ``chosen``.

Rule. The gold score is the short task's :func:`~dschat.data.synthetic_task.synthetic_gold_score`
((positive - negative words) / words): one ground-truth rule for both tasks, so the learned reward model's
score and the gold score can be compared (reward hacking shows as the RM score rising while gold does not).

Assets (``python scripts/make_synthetic_assets.py``; byte-identical for the same code):
``dschat/assets/synthetic-long/{train,validation}.jsonl`` (:data:`SPLIT_SIZES` pairs from seeds 11 and 12), with
the short task's item split (:data:`~dschat.data.synthetic_task.SPLIT_ITEMS`): no validation prompt occurs
in training (32 distinct validation prompts, 88 training prompts).
The vocabulary is the short task's, so the shipped tokenizer (``dschat/assets/tokenizer``) covers it.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import List, Sequence

from .schema import PreferencePair
from .synthetic_task import (ASPECTS, ASSETS_DIR, ITEMS, MODIFIERS, SENTIMENT_WORDS, SPLIT_ITEMS,
                             synthetic_gold_score, write_pairs_jsonl)

SYNTHETIC_LONG_DATA_DIR = ASSETS_DIR / "synthetic-long"
SPLIT_SIZES = {"train": 1000, "validation": 160}
SPLIT_SEEDS = {"train": 11, "validation": 12}
MIN_SENTENCES, MAX_SENTENCES = 19, 22
STANCE_FOLLOW = 0.5
"""Probability that a later sentiment slot repeats the opening stance (else uniform over -1, 0, 1)."""
PROMPT_TEMPLATES = (
    "Write a detailed review of the {item}.\nReview:",
    "Write a long review of the {item}.\nReview:",
    "Tell me everything you thought of the {item}.\nReview:",
    "Give your full opinion of the {item}.\nReview:",
)
OPENING_TEMPLATES = ("Overall it felt {word}", "The {item} is {word}")
SENTENCE_TEMPLATES = (
    "The {item} is {word}",
    "The {aspect} is {modifier} {word}",
    "The {aspect} was {word}",
    "I found the {aspect} {word}",
    "My friends said it was {word}",
    "Overall it felt {word}",
)

long_gold_score = synthetic_gold_score
"""The gold score of this task is the short task's rule (see the module docstring)."""


def generate_long_pairs(count: int, seed: int, items: Sequence[str] = ITEMS) -> List[PreferencePair]:
    """``count`` pairs reviewing ``items``, from ``random.Random(seed)`` (whose stream Python keeps stable across
    versions)."""
    rng = random.Random(seed)
    return [_generate_pair(rng, items) for _ in range(count)]


def _generate_pair(rng: random.Random, items: Sequence[str]) -> PreferencePair:
    item = rng.choice(items)
    skeleton = _skeleton(rng, item)
    while True:
        first, second = _sentiments(rng, len(skeleton)), _sentiments(rng, len(skeleton))
        if sum(first) != sum(second):
            break
    better, worse = (first, second) if sum(first) > sum(second) else (second, first)
    return PreferencePair(prompt=rng.choice(PROMPT_TEMPLATES).format(item=item),
                          chosen=_render(skeleton, better, rng), rejected=_render(skeleton, worse, rng))


def _skeleton(rng: random.Random, item: str) -> List[str]:
    """An opening sentence then 18-21 more, item, aspect and modifier filled, the sentiment slot left open."""
    templates = [rng.choice(OPENING_TEMPLATES)]
    templates += [rng.choice(SENTENCE_TEMPLATES) for _ in range(rng.randint(MIN_SENTENCES, MAX_SENTENCES) - 1)]
    return [t.format(item=item, aspect=rng.choice(ASPECTS), modifier=rng.choice(MODIFIERS), word="{word}")
            for t in templates]


def _sentiments(rng: random.Random, slots: int) -> List[int]:
    """The opening stance, then each later slot: the stance with probability STANCE_FOLLOW, else uniform."""
    stance = rng.choice((-1, 0, 1))
    return [stance] + [stance if rng.random() < STANCE_FOLLOW else rng.choice((-1, 0, 1)) for _ in range(slots - 1)]


def _render(skeleton: Sequence[str], sentiments: Sequence[int], rng: random.Random) -> str:
    sentences = [s.format(word=rng.choice(SENTIMENT_WORDS[v])) for s, v in zip(skeleton, sentiments)]
    return " " + " ".join(f"{sentence}." for sentence in sentences)


def write_long_assets(assets_dir: Path) -> List[Path]:
    """The pair files of this task under ``assets_dir/synthetic-long``; returns them."""
    data_dir = Path(assets_dir) / SYNTHETIC_LONG_DATA_DIR.name
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, size in SPLIT_SIZES.items():
        paths.append(data_dir / f"{split}.jsonl")
        write_pairs_jsonl(generate_long_pairs(size, SPLIT_SEEDS[split], SPLIT_ITEMS[split]), paths[-1])
    return paths
