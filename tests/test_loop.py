"""The shared training loop (every stage): optimizer steps are counted where DeepSpeed takes them, also when an
epoch's batches are not a multiple of the accumulation, so the LR schedule runs exactly to its end."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import read_metrics
from dschat.core.distributed import init_distributed
from dschat.training.engine import EngineConfig, init_train_engine
from dschat.training.loop import EngineStep, num_update_steps, train_loop
from dschat.training.metrics import MetricLogger


def tiny_engine(accumulation: int, total_steps: int):
    torch.manual_seed(0)
    config = EngineConfig(zero_stage=0, dtype="fp32", offload=False, offload_params=False,
                          gradient_checkpointing=False, lora_dim=0, lora_alpha=16.0, lora_dropout=0.0,
                          micro_batch_size=2, gradient_accumulation_steps=accumulation, learning_rate=0.1,
                          weight_decay=0.0, adam_betas=(0.9, 0.95), lr_scheduler_type="linear", warmup_steps=0,
                          gradient_clipping=1.0)
    return init_train_engine(torch.nn.Linear(4, 1), config, world_size=1, num_update_steps=total_steps)


@pytest.mark.parametrize("examples, epochs, accumulation", [(6, 2, 2), (10, 3, 2), (14, 2, 3), (8, 2, 2)])
def test_steps_match_deepspeed_when_epochs_end_mid_accumulation(examples, epochs, accumulation, tmp_path):
    init_distributed()
    per_epoch = examples // 2
    total = num_update_steps(per_epoch, epochs, accumulation)
    assert total == per_epoch * epochs // accumulation  # DeepSpeed's boundaries over the whole run
    engine = tiny_engine(accumulation, total)
    data = [{"x": torch.randn(4), "y": torch.randn(1)} for _ in range(examples)]
    step = EngineStep(engine, lambda batch: {"loss": ((engine(batch["x"]) - batch["y"]) ** 2).mean()})
    args = SimpleNamespace(num_train_epochs=epochs, max_steps=0, resume=False, output_dir=str(tmp_path), seed=0,
                           log_steps=1, eval_steps=0, save_steps=0, no_progress_bar=True)
    logger = MetricLogger(str(tmp_path), None)
    train_loop(step, data, None, 2, lambda: {"n": 0.0}, args, 0, 1, logger, engines={"": engine}, prefix="t",
               accumulation=accumulation, summarize=step.summarize)
    logger.close()
    logged = [record["step"] for record in read_metrics(str(tmp_path)) if "t/loss" in record]
    assert engine.global_steps == total
    assert logged == list(range(1, total + 1))
    assert engine.get_lr()[0] == pytest.approx(0.0)  # the linear schedule ran to its end, not short of it
