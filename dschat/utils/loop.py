"""The supervised training loop steps 1 and 2 share (and the DPO baseline): seeded per-epoch data order that
resumes mid-epoch, gradient accumulation through DeepSpeed, periodic evaluation, logging and checkpoints."""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from .checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from .distributed import all_reduce_mean, is_main_process
from .faults import NonFiniteError, RunStopped, require_finite

StepFn = Callable[[dict], Dict[str, torch.Tensor]]


def epoch_order(num_examples: int, seed: int, epoch: int, rank: int, world_size: int, batch_size: int) -> list:
    """This process's example indices for ``epoch``: one seeded permutation shared by all processes, cut into
    equal per-process shards of whole batches (the ragged tail is dropped so every process steps together)."""
    generator = torch.Generator().manual_seed(seed + epoch)
    permutation = torch.randperm(num_examples, generator=generator).tolist()
    per_process = (num_examples // (world_size * batch_size)) * batch_size
    return permutation[rank * per_process:(rank + 1) * per_process]


def batches_per_epoch(num_examples: int, world_size: int, batch_size: int) -> int:
    return num_examples // (world_size * batch_size)


def make_loader(dataset: Dataset, collate_fn, batch_size: int, seed: int, epoch: int, rank: int,
                world_size: int, skip_batches: int = 0) -> DataLoader:
    """Batches of ``epoch`` in their seeded order, starting after ``skip_batches`` (for resume).

    The loader gets its own generator: iterating a DataLoader otherwise draws from the global RNG, which would
    make a resumed run (restored RNG, new iterator) sample differently from an uninterrupted one."""
    order = epoch_order(len(dataset), seed, epoch, rank, world_size, batch_size)
    return DataLoader(dataset, batch_size=batch_size, sampler=order[skip_batches * batch_size:],
                      collate_fn=collate_fn, generator=torch.Generator().manual_seed(seed + epoch))


def num_update_steps(num_examples: int, args, world_size: int) -> int:
    """Optimizer steps the run will take (honours ``--max_steps``)."""
    per_epoch = batches_per_epoch(num_examples, world_size, args.per_device_train_batch_size)
    steps = math.ceil(per_epoch / args.gradient_accumulation_steps) * args.num_train_epochs
    return min(steps, args.max_steps) if args.max_steps else steps


def stopped_at(err: NonFiniteError, step: int, output_dir: str) -> RunStopped:
    """The one-line error a run stops with when step ``step`` met a non-finite value: nothing was updated and
    the last good checkpoint stays ``latest``."""
    return RunStopped(f"step {step}: {err}; stopped before the update, the last good checkpoint is "
                      f"{latest_checkpoint(output_dir) or 'none'} (a lower learning rate may help)")


def _mean_metrics(history: list) -> Dict[str, float]:
    keys = history[0].keys()
    return {key: all_reduce_mean(torch.stack([h[key].detach().float() for h in history]).mean()).item()
            for key in keys}


def train_loop(engine, dataset: Dataset, collate_fn, step_fn: StepFn, evaluate: Callable[[], Dict[str, float]],
               args, rank: int, world_size: int, metric_logger, prefix: str,
               on_finish: Optional[Callable[[], None]] = None) -> Dict[str, float]:
    """Train ``engine`` with ``step_fn(batch) -> {"loss": ..., other metrics}`` (it must not call backward).

    Logs ``{prefix}/...`` metrics every ``--log_steps`` optimizer steps, evaluates every ``--eval_steps`` (and
    at the end), saves a resumable checkpoint every ``--save_steps``, and resumes with ``--resume``.
    Returns the final evaluation metrics.
    """
    state = TrainState()
    if args.resume:
        loaded = load_checkpoint(args.output_dir, {"model": engine})
        if loaded is not None:
            state = loaded[0]
            metric_logger.resume_at(state.global_step)
    total_steps = num_update_steps(len(dataset), args, world_size)
    per_epoch = batches_per_epoch(len(dataset), world_size, args.per_device_train_batch_size)
    if per_epoch == 0:
        raise ValueError(f"{len(dataset)} training examples are fewer than one batch of "
                         f"{args.per_device_train_batch_size} x {world_size} processes")
    history = []
    progress = tqdm(total=total_steps, initial=state.global_step, desc=prefix,
                    disable=args.no_progress_bar or not is_main_process())
    engine.train()
    while state.global_step < total_steps and state.epoch < args.num_train_epochs:
        loader = make_loader(dataset, collate_fn, args.per_device_train_batch_size, args.seed, state.epoch,
                             rank, world_size, skip_batches=state.batch_in_epoch)
        for batch in loader:
            metrics = step_fn(batch)
            try:
                require_finite(metrics["loss"], "loss")
            except NonFiniteError as err:
                raise stopped_at(err, state.global_step + 1, args.output_dir) from None
            engine.backward(metrics["loss"])
            engine.step()
            history.append(metrics)
            state.batch_in_epoch += 1
            boundary = state.batch_in_epoch % args.gradient_accumulation_steps == 0 or state.batch_in_epoch == per_epoch
            if not boundary:
                continue
            state.global_step += 1
            progress.update(1)
            if state.global_step % args.log_steps == 0 or state.global_step == total_steps:
                logged = _mean_metrics(history)
                logged["lr"] = engine.get_lr()[0]
                metric_logger.log(state.global_step, {f"{prefix}/{k}": v for k, v in logged.items()})
                history = []
            if args.eval_steps and state.global_step % args.eval_steps == 0 and state.global_step < total_steps:
                metric_logger.log(state.global_step, {f"eval/{k}": v for k, v in evaluate().items()})
                engine.train()
            if state.global_step >= total_steps:
                break
            if args.save_steps and state.global_step % args.save_steps == 0:
                save_checkpoint(args.output_dir, {"model": engine}, state)
        else:
            state.epoch += 1
            state.batch_in_epoch = 0
            continue
        break
    progress.close()
    final = evaluate()
    metric_logger.log(state.global_step, {f"eval/{k}": v for k, v in final.items()})
    return final
