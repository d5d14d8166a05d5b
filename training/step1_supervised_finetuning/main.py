#!/usr/bin/env python
"""Step 1: supervised fine-tuning on (prompt, chosen) — loss on response tokens only (paper §B.2).

Runs with plain ``python``, ``torchrun`` or ``deepspeed``, on CPU (gloo) or GPU (nccl):

    python training/step1_supervised_finetuning/main.py --output_dir outputs/sft
"""
from __future__ import annotations

import argparse
import math

import torch

from dschat.utils.checkpoint import save_hf_model
from dschat.utils.cli import run_cli
from dschat.utils.config import (add_data_args, add_model_args, add_optim_args, add_runtime_args,
                                 parse_args_with_config, resolve_accumulation)
from dschat.utils.data import SFTCollator, SFTDataset
from dschat.utils.distributed import all_reduce_mean, init_distributed
from dschat.utils.engine import init_train_engine, prepare_model
from dschat.utils.loop import num_update_steps, train_loop
from dschat.utils.metrics import MetricLogger
from dschat.utils.model import load_causal_lm, load_tokenizer
from dschat.utils.seeding import set_random_seed
from dschat.utils.stage_data import eval_pairs, train_pairs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    add_data_args(parser)
    add_optim_args(parser, lr=5e-5)
    add_runtime_args(parser)
    return parser


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


def main(argv=None) -> dict:
    args = parse_args_with_config(build_parser(), argv)
    rank, world_size, device = init_distributed()
    resolve_accumulation(args, world_size)
    set_random_seed(args.seed)
    tokenizer = load_tokenizer(args.model_name_or_path)
    train_set = SFTDataset(train_pairs(args, phase=0), tokenizer, args.max_seq_len)
    eval_set = SFTDataset(eval_pairs(args), tokenizer, args.max_seq_len)
    model = prepare_model(load_causal_lm(args.model_name_or_path, tokenizer, args.dtype, args.seed), args)
    engine = init_train_engine(model, args, world_size, num_update_steps(len(train_set), args, world_size))
    metric_logger = MetricLogger(args.output_dir, args.tensorboard_dir)
    eval_loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(eval_set, range(rank, len(eval_set), world_size)),
        batch_size=args.per_device_eval_batch_size, collate_fn=SFTCollator.for_tokenizer(tokenizer))

    def step(batch: dict) -> dict:
        batch = {key: value.to(device) for key, value in batch.items()}
        return {"loss": engine(**batch).loss}

    metric_logger.log(0, {f"eval/{k}": v for k, v in evaluate_perplexity(engine, eval_loader, device).items()})
    final = train_loop(engine, train_set, SFTCollator.for_tokenizer(tokenizer), step,
                       lambda: evaluate_perplexity(engine, eval_loader, device),
                       args, rank, world_size, metric_logger, prefix="sft")
    save_hf_model(engine, tokenizer, args.output_dir)
    metric_logger.close()
    return final


if __name__ == "__main__":
    run_cli(main)
