"""What steps 1 and 2 (SFT, reward model, DPO) share: batch sizes for the process count, one trained engine on
pair/sequence datasets of one ``--data_split`` phase, the shared loop, and the final HF checkpoint."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Tuple

from dschat.stages.configs import SupervisedArgs
from dschat.stages.resolve import resolve
from dschat.stages.startup import check_files, pair_sets
from dschat.training.checkpoint import save_hf_model
from dschat.core.distributed import init_distributed
from dschat.training.engine import EngineConfig, init_train_engine, prepare_model
from dschat.training.loop import EngineStep, shard_loader, train_loop, training_steps
from dschat.training.metrics import MetricLogger
from dschat.training.output_dir import require_checkpoint_space, require_writable
from dschat.model import load_tokenizer
from dschat.training.run_record import mark_finished, write_run_config
from dschat.core.seeding import set_random_seed


def engine_config(args: SupervisedArgs, num_update_steps: int) -> EngineConfig:
    """The DeepSpeed settings of the one trained model of steps 1-2."""
    return EngineConfig(
        zero_stage=args.zero_stage, dtype=args.dtype, offload=args.offload, offload_params=args.offload_params,
        gradient_checkpointing=args.gradient_checkpointing, lora_dim=args.lora_dim, lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout, micro_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, learning_rate=args.learning_rate,
        weight_decay=args.weight_decay, adam_betas=(args.adam_beta1, args.adam_beta2),
        lr_scheduler_type=args.lr_scheduler_type, warmup_steps=args.warmup(num_update_steps),
        gradient_clipping=args.gradient_clipping)


@dataclass
class Stage:
    """What a stage's loss and evaluation need: the resolved flags, the trained engine, its engine settings,
    the tokenizer, the device and the evaluation batches."""

    args: Any
    engine: Any
    engine_config: EngineConfig
    tokenizer: Any
    device: Any
    world_size: int
    eval_loader: Any


def run_supervised(args: SupervisedArgs, *, collator_cls, load_model: Callable,
                   objective: Callable[[Stage], Tuple[Callable, Callable[[], Dict[str, float]]]],
                   prefix: str, task_type: str = "CAUSAL_LM") -> Dict[str, float]:
    """Train ``load_model(path, tokenizer, dtype, seed)`` on the rows of stage ``prefix``
    (:data:`~dschat.stages.startup.SUPERVISED_DATA`); ``objective(stage)`` gives
    ``(loss(batch) -> {"loss", ...}, evaluate() -> metrics)``. Saves the model under ``--output_dir`` and
    returns the final evaluation."""
    require_writable(args.output_dir)
    rank, world_size, device = init_distributed()
    args = resolve(prefix, args, world_size)  # the cross-flag rules the pre-flight checks (stages/resolve.py)
    check_files(args)  # and the files it reads (stages/startup.py)
    set_random_seed(args.seed)
    tokenizer = load_tokenizer(args.model_name_or_path)
    train_set, eval_set = pair_sets(args, tokenizer, prefix)
    steps = training_steps(args, len(train_set), args.per_device_train_batch_size, world_size,
                           args.gradient_accumulation_steps)
    config = engine_config(args, steps)
    model = prepare_model(load_model(args.model_name_or_path, tokenizer, args.dtype, args.seed), config, task_type)
    engine = init_train_engine(model, config, world_size, steps)
    collate = collator_cls.for_tokenizer(tokenizer)
    stage = Stage(args, engine, config, tokenizer, device, world_size,
                  shard_loader(eval_set, args.per_device_eval_batch_size, collate, rank, world_size))
    loss, evaluate = objective(stage)
    require_checkpoint_space(args.output_dir, {"model": engine})
    os.makedirs(args.output_dir, exist_ok=True)  # start-up passed: the folder now, on every process
    record = write_run_config(args, prefix, world_size) if rank == 0 else None
    step = EngineStep(engine, loss)
    metric_logger = MetricLogger(args.output_dir, args.tensorboard_dir, report_to=args.report_to,
                                 run_config=record and record["config"])
    final = train_loop(step, train_set, collate, args.per_device_train_batch_size, evaluate, args, rank,
                       world_size, metric_logger, engines={"model": engine}, prefix=prefix,
                       accumulation=args.gradient_accumulation_steps, summarize=step.summarize)
    save_hf_model(engine, tokenizer, args.output_dir)
    if rank == 0:
        mark_finished(args.output_dir)
    metric_logger.close()
    return final
