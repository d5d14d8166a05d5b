"""Reward model and critic: a causal-LM backbone with a scalar head (InstructGPT; paper §2, §B.2).

We use transformers' own ``*ForSequenceClassification`` class with ``num_labels=1``: its ``score`` head is a
bias-free linear layer on every hidden state and it pools the last non-pad token (``config.pad_token_id``, saved),
so a reward model saved by this library loads with ``AutoModelForSequenceClassification.from_pretrained`` and,
fed its saved tokenizer's plain call (which adds the bos and eos it was trained with), gives the same score
for either padding side (``evaluation.rm_interop`` checks this and TRL's conventions). The critic is the same
module read at every position (``token_values``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import torch
from transformers import AutoModelForSequenceClassification, GemmaForSequenceClassification

from .loading import DTYPES, ModelLoadError, resolve_model_path
from .names import OFFLINE_NAMES, TINY_GEMMA, looks_like_hub_id
from .tiny import tiny_gemma_config


SCORE_HEAD = "score"
"""Name of the scalar head module of transformers' ``*ForSequenceClassification`` models."""


def score_head_missing(name: str, flag: str = "reward model / critic") -> Optional[str]:
    """None when checkpoint ``name``'s ``config.json`` names a ``*ForSequenceClassification`` architecture (a
    model with a score head: a reward model, or a critic initialised from one), or cannot be read here without a
    download (the load then checks the weights); else the one line refusing it, naming ``flag``. Reads no
    weights."""
    if name in OFFLINE_NAMES:  # built here (tiny-gemma with its head); the load checks the converted SmolLM2
        return None
    path = os.path.join(name, "config.json")
    if not os.path.isfile(path):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json") if looks_like_hub_id(name) else None
        if not isinstance(cached, str):
            return None
        path = cached
    architectures = json.loads(Path(path).read_text()).get("architectures") or []
    if any(arch.endswith("ForSequenceClassification") for arch in architectures):
        return None
    return (f"{flag} {name}: the checkpoint has no score head (config.json's architectures: "
            f"{', '.join(architectures) or 'none'}; is it a causal LM?); expected a reward model trained by step 2")


def load_reward_model(name: str, tokenizer, dtype: str = "fp32", seed: int = 0, require_head: bool = False):
    """A scalar-head model initialised from checkpoint ``name`` (an SFT model or a trained RM).

    ``require_head``: the head must come from the checkpoint (a reward model, a critic initialised from one);
    a checkpoint without it (a causal LM) would get a randomly initialised head, so it is refused with a
    ModelLoadError naming the path. Step 2 leaves it off: it starts the head from scratch on purpose."""
    path = resolve_model_path(name)
    if path == TINY_GEMMA:
        config = tiny_gemma_config(tokenizer)
        config.num_labels = 1
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = GemmaForSequenceClassification(config).to(DTYPES[dtype])
    else:
        try:
            model, info = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=1, dtype=DTYPES[dtype], output_loading_info=True)
        except OSError as err:
            raise ModelLoadError(f"reward model {name}: {str(err).splitlines()[0]}") from None
        missing = sorted(key for key in info["missing_keys"] if key.split(".")[0] == SCORE_HEAD)
        if require_head and missing:
            raise ModelLoadError(f"reward model / critic {name}: the checkpoint has no score head ({', '.join(missing)} "
                                 "missing; is it a causal LM?); expected a reward model trained by step 2")
    if model.get_input_embeddings().num_embeddings < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def _backbone_and_head(model):
    if hasattr(model, "get_base_model"):  # a peft (LoRA) wrapper
        model = model.get_base_model()
    return model.base_model, model.score


def token_values(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Scalar head at every position, ``[B, T]``: V(s_t) for the critic, r at the last token for the RM."""
    backbone, head = _backbone_and_head(model)
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                      use_cache=False).last_hidden_state
    return head(hidden).squeeze(-1).float()


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first attended token, so left padding does not shift them (as in
    ``generate``)."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the rightmost attended position of each row, for any padding side."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (positions * attention_mask.long()).argmax(dim=1)


def sequence_scores(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Reward r(x, y) ``[B]``: the head's value at the last non-pad token (what HF's pooling reads)."""
    values = token_values(model, input_ids, attention_mask)
    return values.gather(1, last_token_index(attention_mask)[:, None]).squeeze(1)


def text_reward_function(path: str, batch_size: int = 32):
    """A reward function over text for a saved reward model at ``path``, in the form of TRL's ``GRPOTrainer``
    ``reward_funcs`` (``fn(prompts, completions, **kwargs) -> [float]``, plain-text prompts): it scores
    ``prompt + completion`` with the saved tokenizer's plain call, so with the bos and eos the model was trained
    on. (Handing the model itself to ``GRPOTrainer`` on plain-text prompts tokenizes with
    ``add_special_tokens=False``: neither token reaches it, and a model scored at the eos is misread.)"""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()

    @torch.no_grad()
    def reward_model(prompts, completions, **kwargs):
        texts = [prompt + completion for prompt, completion in zip(prompts, completions)]
        return [score for start in range(0, len(texts), batch_size)
                for score in model(**tokenizer(texts[start:start + batch_size], padding=True,
                                               return_tensors="pt")).logits[:, 0].float().tolist()]

    return reward_model
