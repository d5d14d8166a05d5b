#!/usr/bin/env python
"""Step 2 (baseline): Direct Preference Optimization (Rafailov et al., 2023), the offline baseline of the
paper's Appendix C.3 / Table 7. Policy and frozen reference both start from the SFT model; the policy is trained
on the preference pairs of the RM phase with the sigmoid loss −log σ(β·[(log π − log π_ref)(y+) −
(log π − log π_ref)(y−)]), log-probs summed over response tokens. Paper: learning rate 2e-7, β = 0.1 (TL;DR),
0.01 (HH-RLHF).

    python training/step2_dpo_finetuning/main.py --model_name_or_path outputs/sft --output_dir outputs/dpo
"""
from __future__ import annotations

import argparse

import torch

from dschat.rlhf.dpo import dpo_loss, logprob_positions, response_logprob_sums
from dschat.rlhf.experience import sequence_logprobs
from dschat.utils.checkpoint import save_hf_model
from dschat.utils.cli import run_cli
from dschat.utils.config import (add_data_args, add_model_args, add_optim_args, add_runtime_args,
                                 parse_args_with_config, resolve_accumulation)
from dschat.utils.data import PairCollator, PairDataset
from dschat.utils.distributed import all_reduce_mean, init_distributed
from dschat.utils.engine import init_eval_engine, init_train_engine, prepare_model
from dschat.utils.loop import num_update_steps, train_loop
from dschat.utils.metrics import MetricLogger
from dschat.utils.model import load_causal_lm, load_tokenizer
from dschat.utils.seeding import set_random_seed
from dschat.utils.stage_data import eval_pairs, train_pairs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    add_data_args(parser)
    add_optim_args(parser, lr=2e-7)
    add_runtime_args(parser)
    dpo = parser.add_argument_group("DPO (Appendix C.3)")
    dpo.add_argument("--beta", type=float, default=0.1,
                     help="β of the implicit reward: 0.1 for TL;DR, 0.01 for HH-RLHF in the paper")
    return parser


def validate(args) -> None:
    if args.beta <= 0:
        raise ValueError(f"--beta {args.beta}: expected a positive number")


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


def main(argv=None) -> dict:
    args = parse_args_with_config(build_parser(), argv)
    validate(args)
    rank, world_size, device = init_distributed()
    resolve_accumulation(args, world_size)
    set_random_seed(args.seed)
    tokenizer = load_tokenizer(args.model_name_or_path)
    train_set = PairDataset(train_pairs(args, phase=1), tokenizer, args.max_seq_len)
    eval_set = PairDataset(eval_pairs(args), tokenizer, args.max_seq_len)
    policy = prepare_model(load_causal_lm(args.model_name_or_path, tokenizer, args.dtype, args.seed), args)
    engine = init_train_engine(policy, args, world_size, num_update_steps(len(train_set), args, world_size))
    reference = init_eval_engine(load_causal_lm(args.model_name_or_path, tokenizer, args.dtype, args.seed), args,
                                 world_size, args.per_device_train_batch_size)
    metric_logger = MetricLogger(args.output_dir, args.tensorboard_dir)
    collate = PairCollator.for_tokenizer(tokenizer)
    eval_loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(eval_set, range(rank, len(eval_set), world_size)),
        batch_size=args.per_device_eval_batch_size, collate_fn=collate)

    def step(batch: dict) -> dict:
        loss, stats = dpo_batch(engine, reference, batch, args.beta, device)
        return {"loss": loss, **stats}

    def evaluate() -> dict:
        return evaluate_preferences(engine, reference, eval_loader, args.beta, device)

    metric_logger.log(0, {f"eval/{k}": v for k, v in evaluate().items()})
    final = train_loop(engine, train_set, collate, step, evaluate, args, rank, world_size, metric_logger,
                       prefix="dpo")
    save_hf_model(engine, tokenizer, args.output_dir)
    metric_logger.close()
    return final


if __name__ == "__main__":
    run_cli(main)
