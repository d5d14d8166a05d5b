"""The embedded synthetic preference task: offline default data and tokenizer for demos, tests and CI.

Task. Prompts ask for a short review of an item (30 items, 4 prompt templates)::

    Write a review of the lamp.\nReview:

Responses (one leading space, 9-16 words, a vocabulary of about 110 words) join two or three clauses, each
carrying one *sentiment slot* filled with a positive, neutral or negative adjective::

     The lamp is lovely, the price was awful and overall it felt okay.

Rule. :func:`synthetic_gold_score` is the ground truth: (positive words - negative words) / words, over
lower-cased alphabetic words, in [-1, 1]. A pair shares one skeleton (same clauses, item, aspects,
modifiers; so the same length) and differs only in the sentiment words; the two sentiment assignments are
drawn independently and uniformly, ties in the sentiment sum are redrawn, and the higher-scoring response
is ``chosen``. So the preference is decided by sentiment alone (not length or topic), both responses of a
pair come from the same distribution, and chosen responses still hold negative words that PPO can learn
to replace: a reward model must compare sentiment counts, which a tiny transformer learns in minutes.

Assets (regenerate with ``python scripts/make_synthetic_assets.py``; byte-identical for the same code):

* ``dschat/assets/synthetic/{train,validation}.jsonl``: 6000 / 400 pairs in the canonical schema of
  :mod:`dschat.data.adapters.jsonl`, from seeds 1 and 2. The splits share no prompt: validation reviews
  only the :data:`HELD_OUT_ITEMS` (8 items, 32 distinct prompts), training only the other 22 (88 prompts), so
  a held-out score measures prompts no stage trained on;
* ``dschat/assets/tokenizer/``: a ByteLevel BPE tokenizer trained on those texts, saved with
  ``save_pretrained`` (load with ``AutoTokenizer.from_pretrained``). Special tokens Gemma-style:
  ``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3; it adds none of them itself (the tokenised datasets
  add bos and eos explicitly).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Iterable, List, Sequence

from .schema import PreferencePair

ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"
SYNTHETIC_DATA_DIR = ASSETS_DIR / "synthetic"
SYNTHETIC_TOKENIZER_DIR = ASSETS_DIR / "tokenizer"
SPLIT_SIZES = {"train": 6000, "validation": 400}
SPLIT_SEEDS = {"train": 1, "validation": 2}

ITEMS = ("movie", "phone", "laptop", "book", "hotel", "cafe", "camera", "game", "song", "album", "jacket",
         "printer", "bicycle", "restaurant", "museum", "podcast", "tablet", "lamp", "chair", "backpack",
         "kettle", "watch", "show", "novel", "park", "bakery", "headset", "speaker", "keyboard", "sofa")
ASPECTS = ("price", "design", "service", "quality", "sound", "screen", "story", "staff", "battery", "size",
           "color", "food", "music", "ending", "material", "delivery")
POSITIVE_WORDS = ("great", "excellent", "wonderful", "lovely", "amazing", "superb", "delightful",
                  "brilliant", "pleasant", "fantastic", "charming", "perfect", "good", "nice")
NEGATIVE_WORDS = ("awful", "terrible", "poor", "boring", "dreadful", "horrible", "disappointing",
                  "annoying", "broken", "weak", "ugly", "useless", "bad", "cheap")
NEUTRAL_WORDS = ("okay", "average", "plain", "ordinary", "standard", "typical", "simple", "normal")
MODIFIERS = ("really", "quite", "very", "rather", "fairly")
HELD_OUT_ITEMS = ITEMS[::4]
"""The items only the validation split reviews (every fourth): its prompts never occur in training."""
SPLIT_ITEMS = {"train": tuple(item for item in ITEMS if item not in HELD_OUT_ITEMS), "validation": HELD_OUT_ITEMS}
PROMPT_TEMPLATES = (
    "Write a review of the {item}.\nReview:",
    "Write a short review of the {item}.\nReview:",
    "What did you think of the {item}?\nReview:",
    "Give your opinion of the {item}.\nReview:",
)
CLAUSE_TEMPLATES = (
    "the {item} is {word}",
    "the {aspect} is {modifier} {word}",
    "the {aspect} was {word}",
    "I found the {aspect} {word}",
    "overall it felt {word}",
    "my friends said it was {word}",
)
MIN_WORDS, MAX_WORDS = 6, 16
SENTIMENT_WORDS = {-1: NEGATIVE_WORDS, 0: NEUTRAL_WORDS, 1: POSITIVE_WORDS}
WORD = re.compile(r"[a-z]+")
_POSITIVE, _NEGATIVE = frozenset(POSITIVE_WORDS), frozenset(NEGATIVE_WORDS)


def synthetic_gold_score(text: str) -> float:
    """Ground-truth reward: (positive - negative sentiment words) / all words, in [-1, 1]; 0.0 for no words."""
    words = WORD.findall(text.lower())
    if not words:
        return 0.0
    positive = sum(word in _POSITIVE for word in words)
    negative = sum(word in _NEGATIVE for word in words)
    return (positive - negative) / len(words)


def generate_pairs(count: int, seed: int, items: Sequence[str] = ITEMS) -> List[PreferencePair]:
    """``count`` pairs reviewing ``items``, from ``random.Random(seed)`` (whose stream Python keeps stable across
    versions)."""
    rng = random.Random(seed)
    return [_generate_pair(rng, items) for _ in range(count)]


def _generate_pair(rng: random.Random, items: Sequence[str]) -> PreferencePair:
    item = rng.choice(items)
    skeleton = _skeleton(rng, item)
    first, second = _distinct_sentiment_assignments(rng, len(skeleton))
    better, worse = (first, second) if sum(first) > sum(second) else (second, first)
    return PreferencePair(
        prompt=rng.choice(PROMPT_TEMPLATES).format(item=item),
        chosen=_render(skeleton, better, rng),
        rejected=_render(skeleton, worse, rng),
    )


def _skeleton(rng: random.Random, item: str) -> List[str]:
    """Two or three distinct clause templates, item, aspect and modifier filled, the sentiment slot left open."""
    while True:
        templates = rng.sample(CLAUSE_TEMPLATES, rng.randint(2, 3))
        clauses = [template.format(item=item, aspect=rng.choice(ASPECTS), modifier=rng.choice(MODIFIERS),
                                   word="{word}") for template in templates]
        if MIN_WORDS <= len(_join(clauses).split()) <= MAX_WORDS:
            return clauses


def _distinct_sentiment_assignments(rng: random.Random, slots: int):
    while True:
        first = [rng.choice((-1, 0, 1)) for _ in range(slots)]
        second = [rng.choice((-1, 0, 1)) for _ in range(slots)]
        if sum(first) != sum(second):
            return first, second


def _render(skeleton: Sequence[str], sentiments: Sequence[int], rng: random.Random) -> str:
    clauses = [clause.format(word=rng.choice(SENTIMENT_WORDS[value])) for clause, value in zip(skeleton, sentiments)]
    sentence = _join(clauses)
    return f" {sentence[0].upper()}{sentence[1:]}."


def _join(clauses: Sequence[str]) -> str:
    return ", ".join(clauses[:-1]) + " and " + clauses[-1]


def write_pairs_jsonl(pairs: Iterable[PreferencePair], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for pair in pairs:
            record = {"prompt": pair.prompt, "chosen": pair.chosen, "rejected": pair.rejected}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def train_synthetic_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    """A ByteLevel BPE ``PreTrainedTokenizerFast`` with Gemma-style special tokens (pad 0, eos 1, bos 2, unk 3)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
        model_max_length=512, padding_side="right", clean_up_tokenization_spaces=False,
    )


def load_synthetic_tokenizer(path: Path = SYNTHETIC_TOKENIZER_DIR):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def write_synthetic_assets(assets_dir: Path) -> List[Path]:
    """Generate the pair files and the tokenizer under ``assets_dir``; returns the files written."""
    data_dir, tokenizer_dir = Path(assets_dir) / "synthetic", Path(assets_dir) / "tokenizer"
    data_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    texts = []
    for split, size in SPLIT_SIZES.items():
        pairs = generate_pairs(size, SPLIT_SEEDS[split], SPLIT_ITEMS[split])
        write_pairs_jsonl(pairs, data_dir / f"{split}.jsonl")
        texts.extend(text for pair in pairs for text in (pair.prompt, pair.chosen, pair.rejected))
    tokenizer = train_synthetic_tokenizer(texts)
    tokenizer.save_pretrained(str(tokenizer_dir))
    return sorted(path for path in Path(assets_dir).rglob("*") if path.is_file())
