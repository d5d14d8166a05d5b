"""Tokenised datasets and collators, checked on a hand-built word-level tokenizer with known ids."""
import logging

import pytest
import torch

from conftest import BOS, EOS, PAD, word_tokenizer
from dschat.data import (
    DataError,
    PairCollator,
    PairDataset,
    PreferencePair,
    PromptCollator,
    PromptDataset,
    SFTCollator,
    SFTDataset,
    with_sequence_layout,
)

M = -100


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


def test_sft_labels_mask_bos_and_prompt_and_keep_response_and_eos(tokenizer):
    item = SFTDataset([PreferencePair("q1 q2", " r1 r2", " x")], tokenizer, max_seq_len=16)[0]
    assert item["input_ids"].tolist() == [BOS, 4, 5, 6, 7, EOS]
    assert item["labels"].tolist() == [M, M, M, 6, 7, EOS]
    assert item["attention_mask"].tolist() == [1] * 6


def test_sft_without_bos_token_prepends_nothing():
    item = SFTDataset([PreferencePair("q1", " r1")], word_tokenizer(bos=False), max_seq_len=16)[0]
    assert item["input_ids"].tolist() == [4, 6, EOS] and item["labels"].tolist() == [M, 6, EOS]


def test_too_long_examples_are_counted_logged_skips(tokenizer, caplog):
    pairs = [PreferencePair("q1", " r1"), PreferencePair("q1 q2 q1 q2", " r1 r2"), PreferencePair("q2", " r2")]
    with caplog.at_level(logging.WARNING):
        dataset = SFTDataset(pairs, tokenizer, max_seq_len=5)
    assert len(dataset) == 2 and dataset.num_skipped == 1
    assert "skipped 1 of 3 rows: longer than max_seq_len=5: 1 (e.g. pair 1 (8 tokens))" in caplog.text
    assert [dataset[k]["input_ids"].tolist() for k in range(2)] == [[BOS, 4, 6, EOS], [BOS, 5, 7, EOS]]


def test_sft_collator_right_pads_with_pad_id_and_ignored_labels(tokenizer):
    dataset = SFTDataset([PreferencePair("q1", " r1"), PreferencePair("q1 q2", " r1 r2")], tokenizer, 16)
    batch = SFTCollator.for_tokenizer(tokenizer)([dataset[0], dataset[1]])
    assert batch["input_ids"].tolist() == [[BOS, 4, 6, EOS, PAD, PAD], [BOS, 4, 5, 6, 7, EOS]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [1] * 6]
    assert batch["labels"].tolist() == [[M, M, 6, EOS, M, M], [M, M, M, 6, 7, EOS]]
    assert all(tensor.dtype == torch.long for tensor in batch.values())


def test_pair_collator_puts_chosen_rows_first_then_rejected(tokenizer, caplog):
    pairs = [PreferencePair("q1", " r1 r2", " x"), PreferencePair("q2", " r2", " x x")]
    dataset = PairDataset(pairs, tokenizer, max_seq_len=16)
    assert dataset.num_skipped == 0
    batch = PairCollator.for_tokenizer(tokenizer)([dataset[0], dataset[1]])
    assert batch["input_ids"].tolist() == [
        [BOS, 4, 6, 7, EOS],        # chosen of pair 0
        [BOS, 5, 7, EOS, PAD],      # chosen of pair 1
        [BOS, 4, 8, EOS, PAD],      # rejected of pair 0
        [BOS, 5, 8, 8, EOS],        # rejected of pair 1
    ]
    assert batch["attention_mask"].tolist() == [[1] * 5, [1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1] * 5]


def test_pair_too_long_when_either_side_is(tokenizer):
    dataset = PairDataset([PreferencePair("q1", " r1", " x x x")], tokenizer, max_seq_len=4)
    assert len(dataset) == 0 and dataset.num_skipped == 1


def test_prompt_collator_left_pads_and_keeps_original_positions(tokenizer):
    dataset = PromptDataset(["q1 q2 q1 q2", "q1", "q1 q2"], tokenizer, max_prompt_len=3)
    assert dataset.num_skipped == 1
    batch = PromptCollator.for_tokenizer(tokenizer)([dataset[0], dataset[1]])
    assert batch["input_ids"].tolist() == [[PAD, BOS, 4], [BOS, 4, 5]]
    assert batch["attention_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert batch["index"].tolist() == [1, 2]


def test_missing_special_tokens_are_clear_errors():
    with pytest.raises(DataError, match="has no pad_token; set one"):
        SFTCollator.for_tokenizer(word_tokenizer(pad=False))
    no_eos = word_tokenizer()
    no_eos.eos_token = None
    with pytest.raises(DataError, match="has no eos_token"):
        SFTDataset([PreferencePair("q1", " r1")], no_eos, 8)


def test_synthetic_tokenizer_end_to_end_masks_exactly_the_prompt():
    from dschat.data import load_pairs, load_synthetic_tokenizer

    tokenizer = load_synthetic_tokenizer()
    pair = load_pairs("synthetic", "validation")[0]
    item = SFTDataset([pair], tokenizer, 64)[0]
    prompt_ids = tokenizer(pair.prompt, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(pair.chosen, add_special_tokens=False)["input_ids"]
    assert item["input_ids"].tolist() == [tokenizer.bos_token_id] + prompt_ids + response_ids + [tokenizer.eos_token_id]
    assert item["labels"].tolist() == [M] * (1 + len(prompt_ids)) + response_ids + [tokenizer.eos_token_id]


@pytest.mark.parametrize("bos", [True, False])
def test_sequence_layout_tokenizer_says_what_the_datasets_build_and_is_not_added_twice(bos):
    plain = word_tokenizer(bos=bos)
    prefix = [BOS] if bos else []
    scoring, prompting = with_sequence_layout(plain, eos=True), with_sequence_layout(plain, eos=False)
    assert scoring("q1 q2 r1")["input_ids"] == prefix + [4, 5, 6, EOS]
    assert prompting("q1 q2")["input_ids"] == prefix + [4, 5]
    assert plain("q1 q2")["input_ids"] == [4, 5]  # a copy: the original is unchanged
    pairs = [PreferencePair("q1 q2", " r1", " r2")]
    for layout in (scoring, prompting):  # the datasets add the special tokens themselves, once
        assert PairDataset(pairs, layout, 16)[0]["chosen_input_ids"].tolist() == prefix + [4, 5, 6, EOS]
        assert PromptDataset(["q1 q2"], layout, 16)[0]["input_ids"].tolist() == prefix + [4, 5]
    chat = [{"role": "user", "content": "q1 q2"}, {"role": "assistant", "content": " r1"}]
    assert scoring.apply_chat_template(chat, tokenize=False) == ("<bos>" if bos else "") + "q1 q2 r1<eos>"
    assert prompting.apply_chat_template(chat[:1], tokenize=False, add_generation_prompt=True) == \
        ("<bos>" if bos else "") + "q1 q2"


MEMORY_PROBE = """
import json, resource, sys
from dschat.data import PairDataset, PromptDataset, SFTDataset
from dschat.data.adapters.jsonl import load_jsonl_pairs
from dschat.model import load_tokenizer

tokenizer = load_tokenizer("tiny-gemma")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
pairs = load_jsonl_pairs("train", sys.argv[1])
sizes = [len(SFTDataset(pairs, tokenizer, 64)), len(PairDataset(pairs, tokenizer, 64)),
         len(PromptDataset([p.prompt for p in pairs], tokenizer, 32))]
print(json.dumps({"grew_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
                  "before_mib": before / 1024, "sizes": sizes}))
"""


def test_a_10_mb_row_is_measured_and_skipped_in_bounded_memory(tmp_path):
    """Issue 24, fault 7: one 10 MB prompt among 200 rows. It is skipped as too long by every dataset without
    being tokenised: the peak grows by about what reading the row costs (~3x its size), not the ~2 GiB (6x the
    process) tokenising it took."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    path = tmp_path / "rows.jsonl"
    with open(path, "w") as handle:
        for i in range(200):
            prompt = "word " * 2_000_000 if i == 50 else f"Question {i}: what is {i}+{i}?"
            handle.write(json.dumps({"prompt": prompt, "chosen": f" {2 * i}", "rejected": " 0"}) + "\n")
    assert path.stat().st_size > 10_000_000
    result = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(path)], cwd=ROOT, capture_output=True,
                            text=True, env={**__import__("os").environ, "PYTHONPATH": ROOT}, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert probe["sizes"] == [189, 189, 189]  # 190 training rows (5% of 200 held out) less the long one
    assert probe["grew_mib"] < 64, probe


def test_a_pair_without_rejected_is_an_error_naming_its_row(tokenizer):
    pairs = [PreferencePair("q1", " r1 r2", " x"), PreferencePair("q2", " r1", origin="pairs.jsonl, row 7")]
    with pytest.raises(DataError) as error:
        PairDataset(pairs, tokenizer, max_seq_len=16)
    assert str(error.value).startswith("pairs.jsonl, row 7: no 'rejected' response")
    with pytest.raises(DataError, match="^pair 2: no 'rejected' response"):  # a pair built in code: its position
        PairDataset(pairs[:1] + [PreferencePair("q2", " r1")], tokenizer, max_seq_len=16)
