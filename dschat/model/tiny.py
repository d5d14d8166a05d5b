"""The embedded default model: a tiny Gemma built from a ``GemmaConfig`` (no download).

Same architecture family as the paper's Gemma-2B/7B, scaled down so the whole pipeline runs on a CPU in
minutes. Weights are initialised from a seed, so two builds with the same seed are identical.
"""
from __future__ import annotations

import torch
from transformers import GemmaConfig, GemmaForCausalLM

from .names import tiny_gemma_dims


def tiny_gemma_config(tokenizer, hidden_size: int = 128, num_layers: int = 4) -> GemmaConfig:
    """A ~1M-parameter Gemma config whose vocabulary and special ids match ``tokenizer``."""
    return GemmaConfig(
        **tiny_gemma_dims(len(tokenizer), hidden_size, num_layers),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )


def build_tiny_gemma(tokenizer, seed: int = 0) -> GemmaForCausalLM:
    """A freshly initialised tiny Gemma causal LM (deterministic for a given ``seed``)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return GemmaForCausalLM(tiny_gemma_config(tokenizer))
