"""Step 2: DPO on parsed flags (the command line, its help and the method: :mod:`dschat.cli.dpo`)."""
from __future__ import annotations

import torch

from dschat.stages.configs import DPOConfig
from dschat.stages.supervised import Stage, run_supervised
from dschat.rlhf.dpo import dpo_loss, logprob_positions, response_logprob_sums
from dschat.rlhf.experience import sequence_logprobs
from dschat.data import PairCollator
from dschat.core.distributed import all_reduce_mean
from dschat.training.engine import init_eval_engine
from dschat.model import load_causal_lm


def pair_logps(model, batch: dict, device) -> tuple:
    """Summed response log-probs of the chosen and the rejected responses, ``([B], [B])``, from one forward
    over the ``[chosen..., rejected...]`` batch."""
    input_ids = batch["input_ids"].to(device)
    token_logprobs = sequence_logprobs(model, input_ids, batch["attention_mask"].to(device))
    sums = response_logprob_sums(token_logprobs, logprob_positions(batch["response_mask"].to(device)))
    return sums.chunk(2)


def dpo_batch(policy, reference, batch: dict, beta: float, device) -> tuple:
    """DPO loss and statistics of one pair batch (the reference runs without gradients)."""
    policy_chosen, policy_rejected = pair_logps(policy, batch, device)
    with torch.no_grad():
        reference_chosen, reference_rejected = pair_logps(reference, batch, device)
    return dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)


@torch.no_grad()
def evaluate_preferences(engine, reference, loader, beta: float, device) -> dict:
    """Pair-weighted DPO loss, implicit rewards, margin and accuracy on the evaluation pairs."""
    engine.eval()
    totals = {}
    count = torch.zeros((), device=device)
    for batch in loader:
        loss, stats = dpo_batch(engine, reference, batch, beta, device)
        pairs = batch["input_ids"].shape[0] // 2
        for key, value in {"loss": loss, **stats}.items():
            totals[key] = totals.get(key, torch.zeros((), device=device)) + value.float() * pairs
        count += pairs
    count = all_reduce_mean(count).clamp(min=1)
    return {key: (all_reduce_mean(total) / count).item() for key, total in totals.items()}


def objective(stage: Stage) -> tuple:
    """The DPO loss against a frozen reference (the SFT model, built here after the policy), and the same
    statistics on the evaluation pairs."""
    args = stage.args
    reference = init_eval_engine(load_causal_lm(args.model_name_or_path, stage.tokenizer, args.dtype, args.seed),
                                 stage.engine_config, stage.world_size, args.per_device_train_batch_size)

    def loss(batch: dict) -> dict:
        value, stats = dpo_batch(stage.engine, reference, batch, args.beta, stage.device)
        return {"loss": value, **stats}

    return loss, lambda: evaluate_preferences(stage.engine, reference, stage.eval_loader, args.beta, stage.device)


def run(args: DPOConfig) -> dict:
    """Train with the parsed flags ``args``; returns the final evaluation."""
    return run_supervised(args, collator_cls=PairCollator,
                          load_model=load_causal_lm, objective=objective, prefix="dpo")

