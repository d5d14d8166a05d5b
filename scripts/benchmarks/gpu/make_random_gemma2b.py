"""A Gemma-2B-shaped causal LM with random weights (the published 2B dimensions, bf16) and a 256000-entry tokenizer
(the shipped one, its BPE vocabulary padded with unused entries), written to ``OUT``, and a reward model / critic of
the same shape (a random one-label score head) to ``OUT-rm``: step 3 at the real 2B shape with no download.

    python scripts/benchmarks/gpu/make_random_gemma2b.py OUT
"""
from __future__ import annotations

import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from dschat.cli.plan import hf_config
from dschat.model import load_tokenizer

VOCAB = 256000
"""Gemma's vocabulary size: the logits' width, which dominates a 2B model's activations."""


def padded_tokenizer(out: str):
    """The shipped tokenizer saved to ``out`` with its BPE vocabulary padded to :data:`VOCAB` entries (the
    unused ones are never produced: the merges are unchanged)."""
    load_tokenizer("tiny-gemma").save_pretrained(out)
    path = os.path.join(out, "tokenizer.json")
    with open(path) as handle:
        data = json.load(handle)
    used = set(data["model"]["vocab"].values()) | {token["id"] for token in data.get("added_tokens", [])}
    free = (i for i in range(VOCAB) if i not in used)
    for k, i in enumerate(free):
        data["model"]["vocab"][f"<unused{k}>"] = i
    with open(path, "w") as handle:
        json.dump(data, handle)
    return AutoTokenizer.from_pretrained(out)


def main(out: str) -> None:
    tokenizer = padded_tokenizer(out)
    config = hf_config("gemma-2b")
    config.vocab_size = len(tokenizer)
    config.pad_token_id, config.bos_token_id = tokenizer.pad_token_id, tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    torch.manual_seed(0)
    for head, folder in ((AutoModelForCausalLM, out), (AutoModelForSequenceClassification, out + "-rm")):
        config.num_labels = 1
        with torch.device("cuda"):
            model = head.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        print(f"{folder}: {sum(p.numel() for p in model.parameters()) / 1e9:.3f}B parameters, vocab {len(tokenizer)}")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
