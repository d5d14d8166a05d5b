"""Step 2: the reward model on parsed flags (the command line, its help and the method: :mod:`dschat.cli.rm`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dschat.stages.configs import RMConfig
from dschat.stages.supervised import Stage, run_supervised
from dschat.data import PairCollator
from dschat.core.distributed import all_reduce_mean
from dschat.model import load_reward_model, sequence_scores


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


def objective(stage: Stage) -> tuple:
    """The pairwise loss (with accuracy and margin), and ranking accuracy on the evaluation pairs."""
    def loss(batch: dict) -> dict:
        chosen, rejected = pair_scores(stage.engine.module, batch, stage.device)
        return {"loss": pairwise_loss(chosen, rejected), "accuracy": (chosen > rejected).float().mean(),
                "margin": (chosen - rejected).mean()}

    return loss, lambda: evaluate_ranking(stage.engine, stage.eval_loader, stage.device)


def run(args: RMConfig) -> dict:
    """Train with the parsed flags ``args``; returns the final evaluation."""
    return run_supervised(args, collator_cls=PairCollator,
                          load_model=load_reward_model, objective=objective, prefix="rm", task_type="SEQ_CLS")

