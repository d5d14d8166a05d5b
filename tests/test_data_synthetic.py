"""The shipped synthetic task: data, ground-truth rule, deterministic regeneration, tokenizer."""
import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

from dschat.data import (SYNTHETIC_DATA_DIR, SYNTHETIC_TOKENIZER_DIR, load_pairs, load_synthetic_tokenizer,
                               synthetic_gold_score)
from dschat.data.synthetic_task import ASSETS_DIR, MAX_WORDS, MIN_WORDS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped():
    return {split: load_pairs("synthetic", split) for split in ("train", "validation")}


def test_shipped_sizes_and_format(shipped):
    assert len(shipped["train"]) == 6000 and len(shipped["validation"]) == 400
    for pair in shipped["train"][:200] + shipped["validation"]:
        assert pair.prompt.endswith("\nReview:") and pair.chosen.startswith(" ") and pair.rejected.startswith(" ")
        assert MIN_WORDS <= len(pair.chosen.split()) == len(pair.rejected.split()) <= MAX_WORDS


def test_rule_holds_on_every_shipped_pair(shipped):
    for pairs in shipped.values():
        assert all(synthetic_gold_score(p.chosen) > synthetic_gold_score(p.rejected) for p in pairs)


def test_chosen_responses_leave_room_for_improvement(shipped):
    chosen_scores = [synthetic_gold_score(pair.chosen) for pair in shipped["train"]]
    assert 0 < sum(chosen_scores) / len(chosen_scores) < 0.2
    assert sum(score < 0 for score in chosen_scores) > 300


def test_gold_score():
    assert synthetic_gold_score(" The lamp is great and the price was awful.") == 0.0
    assert synthetic_gold_score(" Great, lovely!") == 1.0
    assert synthetic_gold_score(" The lamp is bad.") == pytest.approx(-0.25)
    assert synthetic_gold_score("") == 0.0


def test_regeneration_is_byte_identical(tmp_path):
    script = REPO / "scripts" / "make_synthetic_assets.py"
    subprocess.run([sys.executable, str(script), "--out-dir", str(tmp_path)], check=True, capture_output=True)
    shipped_files = sorted(p.relative_to(ASSETS_DIR) for p in ASSETS_DIR.rglob("*") if p.is_file())
    assert shipped_files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    for relative in shipped_files:
        assert filecmp.cmp(ASSETS_DIR / relative, tmp_path / relative, shallow=False), relative


def test_assets_stay_small():
    assert sum(p.stat().st_size for p in ASSETS_DIR.rglob("*") if p.is_file()) < 3_000_000
    assert SYNTHETIC_DATA_DIR.parent == SYNTHETIC_TOKENIZER_DIR.parent == ASSETS_DIR


def test_shipped_tokenizer_loads_with_gemma_style_special_tokens():
    tokenizer = load_synthetic_tokenizer()
    ids = (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.unk_token_id)
    assert ids == (0, 1, 2, 3)
    assert (tokenizer.pad_token, tokenizer.eos_token, tokenizer.bos_token) == ("<pad>", "<eos>", "<bos>")
    assert 500 <= len(tokenizer) <= 2048


@pytest.mark.parametrize("text", [
    "Write a review of the lamp.\nReview: The lamp is lovely, the price was awful and overall it felt okay.",
    " Unseen words, digits 123 and ünïcödé survive too.",
])
def test_shipped_tokenizer_round_trips_text(text):
    tokenizer = load_synthetic_tokenizer()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode([tokenizer.bos_token_id] + ids + [tokenizer.eos_token_id], skip_special_tokens=True) == text


def test_in_vocabulary_words_are_single_tokens():
    tokenizer = load_synthetic_tokenizer()
    assert len(tokenizer(" The lamp is lovely", add_special_tokens=False)["input_ids"]) == 4


# ---- the long task (synthetic-long) ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shipped_long():
    return {split: load_pairs("synthetic-long", split) for split in ("train", "validation")}


def test_long_task_sizes_lengths_and_rule(shipped_long):
    from dschat.data.synthetic_long_task import SPLIT_SIZES, long_gold_score

    tokenizer = load_synthetic_tokenizer()
    assert {split: len(pairs) for split, pairs in shipped_long.items()} == SPLIT_SIZES
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"])
               for pair in shipped_long["validation"] for text in (pair.chosen, pair.rejected)]
    assert min(lengths) >= 96 and max(lengths) <= 136  # >= 20 macros at n = 5; step 3's --max_new_tokens 136
    for pairs in shipped_long.values():
        assert all(long_gold_score(p.chosen) > long_gold_score(p.rejected) for p in pairs)
        assert all(p.prompt.endswith("\nReview:") for p in pairs)


def test_long_task_opening_stance_predicts_the_rest():
    """The first decision matters: responses opening with a positive word hold more positive words later."""
    from dschat.data.synthetic_long_task import generate_long_pairs
    from dschat.data.synthetic_task import POSITIVE_WORDS

    def rest_gold(text):
        first, _, rest = text.partition(".")
        return first, synthetic_gold_score(rest)

    opened = {True: [], False: []}
    for pair in generate_long_pairs(300, seed=5):
        for text in (pair.chosen, pair.rejected):
            first, rest = rest_gold(text)
            opened[first.split()[-1] in POSITIVE_WORDS].append(rest)
    assert sum(opened[True]) / len(opened[True]) > sum(opened[False]) / len(opened[False]) + 0.05


def test_gold_score_is_registered_for_the_embedded_tasks():
    from dschat.data.registry import gold_score_of

    assert gold_score_of("synthetic") is synthetic_gold_score
    assert gold_score_of("synthetic-long") is synthetic_gold_score
    assert gold_score_of("tldr") is None and gold_score_of("no-such-data") is None


@pytest.mark.parametrize("task", ["synthetic", "synthetic-long"])
def test_validation_prompts_never_occur_in_training(task):
    """Held out means held out: the two shipped splits share no prompt (validation reviews its own items), and
    each split asks for every item of its side in every template."""
    from dschat.data.synthetic_task import HELD_OUT_ITEMS, ITEMS

    prompts = {split: {pair.prompt for pair in load_pairs(task, split)} for split in ("train", "validation")}
    assert not prompts["train"] & prompts["validation"]
    assert (len(prompts["train"]), len(prompts["validation"])) == (4 * (len(ITEMS) - len(HELD_OUT_ITEMS)),
                                                                   4 * len(HELD_OUT_ITEMS))
    for prompt in prompts["validation"]:
        assert any(f"the {item}" in prompt for item in HELD_OUT_ITEMS)
