"""Step 1: supervised fine-tuning on parsed flags (the command line, its help and the method: :mod:`dschat.cli.sft`)."""
from __future__ import annotations

import math

import torch

from dschat.stages.configs import SFTConfig
from dschat.stages.supervised import Stage, run_supervised
from dschat.data import SFTCollator
from dschat.core.distributed import all_reduce_mean
from dschat.model import load_causal_lm


@torch.no_grad()
def evaluate_perplexity(engine, loader, device) -> dict:
    """Token-weighted mean response loss on the evaluation set and its perplexity."""
    engine.eval()
    loss_sum = torch.zeros((), device=device)
    tokens = torch.zeros((), device=device)
    for batch in loader:
        batch = {key: value.to(device) for key, value in batch.items()}
        logits = engine(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        labels = batch["labels"][:, 1:]
        token_loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().transpose(1, 2), labels, ignore_index=-100, reduction="sum")
        loss_sum += token_loss
        tokens += (labels != -100).sum()
    mean_loss = (all_reduce_mean(loss_sum) / all_reduce_mean(tokens).clamp(min=1)).item()
    return {"loss": mean_loss, "perplexity": math.exp(min(mean_loss, 50.0))}


def objective(stage: Stage) -> tuple:
    """The response-token cross-entropy, and perplexity on the evaluation set."""
    def loss(batch: dict) -> dict:
        batch = {key: value.to(stage.device) for key, value in batch.items()}
        return {"loss": stage.engine(**batch).loss}

    return loss, lambda: evaluate_perplexity(stage.engine, stage.eval_loader, stage.device)


def run(args: SFTConfig) -> dict:
    """Train with the parsed flags ``args``; returns the final evaluation."""
    return run_supervised(args, collator_cls=SFTCollator, load_model=load_causal_lm,
                          objective=objective, prefix="sft")

