#!/usr/bin/env python
"""Step 2: reward model — a scalar head on the SFT model trained with the pairwise loss
``-log σ(r(x, y+) - r(x, y-))`` (InstructGPT; paper §B.2). Saved so that
``AutoModelForSequenceClassification.from_pretrained`` loads it and gives the same scores.

    python training/step2_reward_model_finetuning/main.py --model_name_or_path outputs/sft --output_dir outputs/rm
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from dschat.utils.checkpoint import save_hf_model
from dschat.utils.cli import run_cli
from dschat.utils.config import (add_data_args, add_model_args, add_optim_args, add_runtime_args,
                                 parse_args_with_config, resolve_accumulation)
from dschat.utils.data import PairCollator, PairDataset
from dschat.utils.distributed import all_reduce_mean, init_distributed
from dschat.utils.engine import init_train_engine, prepare_model
from dschat.utils.loop import num_update_steps, train_loop
from dschat.utils.metrics import MetricLogger
from dschat.utils.model import load_reward_model, load_tokenizer, sequence_scores
from dschat.utils.seeding import set_random_seed
from dschat.utils.stage_data import eval_pairs, train_pairs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(parser)
    add_data_args(parser)
    add_optim_args(parser, lr=1e-5)
    add_runtime_args(parser)
    return parser


def pair_scores(model, batch: dict, device) -> tuple:
    """Rewards of the chosen and the rejected responses, ``([B], [B])``, from one forward over the
    ``[chosen..., rejected...]`` batch (row i pairs with row B + i)."""
    scores = sequence_scores(model, batch["input_ids"].to(device), batch["attention_mask"].to(device))
    return scores.chunk(2)


def pairwise_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Bradley-Terry ranking loss ``-log σ(r+ - r-)`` averaged over pairs."""
    return -F.logsigmoid(chosen - rejected).mean()


@torch.no_grad()
def evaluate_ranking(engine, loader, device) -> dict:
    """Pairwise accuracy and mean chosen / rejected scores on the evaluation pairs."""
    engine.eval()
    correct, count, chosen_sum, rejected_sum = (torch.zeros((), device=device) for _ in range(4))
    for batch in loader:
        chosen, rejected = pair_scores(engine.module, batch, device)
        correct += (chosen > rejected).sum()
        count += chosen.numel()
        chosen_sum += chosen.sum()
        rejected_sum += rejected.sum()
    count = all_reduce_mean(count).clamp(min=1)
    return {"accuracy": (all_reduce_mean(correct) / count).item(),
            "chosen_score": (all_reduce_mean(chosen_sum) / count).item(),
            "rejected_score": (all_reduce_mean(rejected_sum) / count).item()}


def main(argv=None) -> dict:
    args = parse_args_with_config(build_parser(), argv)
    rank, world_size, device = init_distributed()
    resolve_accumulation(args, world_size)
    set_random_seed(args.seed)
    tokenizer = load_tokenizer(args.model_name_or_path)
    train_set = PairDataset(train_pairs(args, phase=1), tokenizer, args.max_seq_len)
    eval_set = PairDataset(eval_pairs(args), tokenizer, args.max_seq_len)
    model = prepare_model(load_reward_model(args.model_name_or_path, tokenizer, args.dtype, args.seed), args,
                          task_type="SEQ_CLS")
    engine = init_train_engine(model, args, world_size, num_update_steps(len(train_set), args, world_size))
    metric_logger = MetricLogger(args.output_dir, args.tensorboard_dir)
    eval_loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(eval_set, range(rank, len(eval_set), world_size)),
        batch_size=args.per_device_eval_batch_size, collate_fn=PairCollator.for_tokenizer(tokenizer))

    def step(batch: dict) -> dict:
        chosen, rejected = pair_scores(engine.module, batch, device)
        return {"loss": pairwise_loss(chosen, rejected), "accuracy": (chosen > rejected).float().mean(),
                "margin": (chosen - rejected).mean()}

    metric_logger.log(0, {f"eval/{k}": v for k, v in evaluate_ranking(engine, eval_loader, device).items()})
    final = train_loop(engine, train_set, PairCollator.for_tokenizer(tokenizer), step,
                       lambda: evaluate_ranking(engine, eval_loader, device),
                       args, rank, world_size, metric_logger, prefix="rm")
    save_hf_model(engine, tokenizer, args.output_dir)
    metric_logger.close()
    return final


if __name__ == "__main__":
    run_cli(main)
