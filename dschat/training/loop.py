"""The one training loop of every stage (SFT, RM, DPO, PPO): seeded per-epoch data order that resumes mid-epoch,
optimizer steps counted as DeepSpeed takes them, periodic evaluation, logging and resumable checkpoints.

A stage hands the loop a step function ``update(batch) -> metrics`` that does all the work of one batch (a
forward/backward/step through DeepSpeed for steps 1-2, a whole PPO iteration for step 3; see
:class:`EngineStep`) and says how ``accumulation`` batches make one optimizer step."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import logging
import signal

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from .checkpoint import (TrainState, checkpoint_dir, latest_checkpoint, load_checkpoint, resumable_checkpoint,
                         save_checkpoint)
from dschat.core.distributed import all_reduce_mean, is_main_process
from .faults import NonFiniteError, RunInterrupted, RunStopped, StopRequests, require_finite
from .output_dir import require_checkpoint_space
from .resume_config import CHANGES_KEY, check_resume_config, config_record

logger = logging.getLogger(__name__)

StepFn = Callable[[Any], Dict[str, Any]]
Summarize = Callable[[List[Dict[str, Any]]], Dict[str, float]]


def epoch_order(num_examples: int, seed: int, epoch: int, rank: int, world_size: int, batch_size: int) -> list:
    """This process's example indices for ``epoch``: one seeded permutation shared by all processes, cut into
    equal per-process shards of whole batches (the ragged tail is dropped so every process steps together)."""
    generator = torch.Generator().manual_seed(seed + epoch)
    permutation = torch.randperm(num_examples, generator=generator).tolist()
    per_process = (num_examples // (world_size * batch_size)) * batch_size
    return permutation[rank * per_process:(rank + 1) * per_process]


def batches_per_epoch(num_examples: int, world_size: int, batch_size: int) -> int:
    """Whole batches each process gets per epoch."""
    return num_examples // (world_size * batch_size)


def make_loader(dataset: Dataset, collate_fn, batch_size: int, seed: int, epoch: int, rank: int,
                world_size: int, skip_batches: int = 0) -> DataLoader:
    """Batches of ``epoch`` in their seeded order, starting after ``skip_batches`` (for resume).

    The loader gets its own generator: iterating a DataLoader otherwise draws from the global RNG, which would
    make a resumed run (restored RNG, new iterator) sample differently from an uninterrupted one."""
    order = epoch_order(len(dataset), seed, epoch, rank, world_size, batch_size)
    return DataLoader(dataset, batch_size=batch_size, sampler=order[skip_batches * batch_size:],
                      collate_fn=collate_fn, generator=torch.Generator().manual_seed(seed + epoch))


def batches_from(dataset: Dataset, collate_fn, batch_size: int, seed: int, rank: int, world_size: int,
                 start: int):
    """The batches :func:`train_loop` feeds its step function, from the ``start``-th of the run on, epoch after
    epoch (what an asynchronous rollout producer samples ahead of the trainer)."""
    epoch, skip = divmod(start, batches_per_epoch(len(dataset), world_size, batch_size))
    while True:
        yield from make_loader(dataset, collate_fn, batch_size, seed, epoch, rank, world_size, skip_batches=skip)
        epoch, skip = epoch + 1, 0


def shard_loader(dataset: Dataset, batch_size: int, collate_fn, rank: int, world_size: int) -> DataLoader:
    """Evaluation batches: every ``world_size``-th example from ``rank`` on, in order."""
    return DataLoader(torch.utils.data.Subset(dataset, range(rank, len(dataset), world_size)),
                      batch_size=batch_size, collate_fn=collate_fn)


def num_update_steps(batches: int, num_epochs: int, accumulation: int = 1, max_steps: int = 0) -> int:
    """Optimizer steps of a run of ``num_epochs`` x ``batches`` micro batches per process.

    DeepSpeed steps after every ``accumulation`` micro batches counted over the whole run (an epoch end is no
    boundary: a ragged remainder carries into the next epoch), so the count is ``⌊epochs·batches / accumulation⌋``
    — capped by ``max_steps`` when that is set."""
    steps = batches * num_epochs // accumulation
    return min(steps, max_steps) if max_steps else steps


def training_steps(args, num_examples: int, batch_size: int, world_size: int, accumulation: int = 1,
                   batch_flag: str = "--per_device_train_batch_size") -> int:
    """The optimizer steps of the loop over ``num_examples`` (:func:`num_update_steps`); a ValueError (one line)
    when that is none: fewer examples than one batch (of ``batch_flag``), or fewer batches than one accumulated
    step. The stages call it at start-up, before they create their folder, and the pre-flight with the data's
    size."""
    per_epoch = batches_per_epoch(num_examples, world_size, batch_size)
    if per_epoch == 0:
        raise ValueError(f"{num_examples} training examples are fewer than one batch ({batch_flag} {batch_size} x "
                         f"{world_size} processes)")
    total_steps = num_update_steps(per_epoch, args.num_train_epochs, accumulation, args.max_steps)
    if total_steps == 0:
        raise ValueError(f"{args.num_train_epochs} epoch(s) of {per_epoch} batches make no optimizer step of "
                         f"{accumulation} accumulated batches; lower --gradient_accumulation_steps")
    return total_steps


def stopped_at(err: NonFiniteError, step: int, output_dir: str) -> RunStopped:
    """The one-line error a run stops with when step ``step`` met a non-finite value: nothing was updated and
    the last good checkpoint stays ``latest``."""
    return RunStopped(f"step {step}: {err}; stopped before the update, the last good checkpoint is "
                      f"{latest_checkpoint(output_dir) or 'none'} ({err.hint})")


def mean_metrics(history: List[Dict[str, torch.Tensor]]) -> Dict[str, float]:
    """Each metric averaged over the steps since the last log and over processes."""
    keys = history[0].keys()
    return {key: all_reduce_mean(torch.stack([h[key].detach().float() for h in history]).mean()).item()
            for key in keys}


class EngineStep:
    """The step function of a stage that trains one DeepSpeed engine: ``loss_fn(batch) -> {"loss", ...}``, then
    backward and step (DeepSpeed applies the optimizer at accumulation boundaries). Logs the mean metrics since
    the last log and the learning rate."""

    def __init__(self, engine, loss_fn: StepFn):
        self.engine = engine
        self.loss_fn = loss_fn

    def __call__(self, batch) -> Dict[str, torch.Tensor]:
        self.engine.train()
        metrics = self.loss_fn(batch)
        require_finite(metrics["loss"], "loss")
        self.engine.backward(metrics["loss"])
        self.engine.step()
        return metrics

    def summarize(self, history: List[Dict[str, torch.Tensor]]) -> Dict[str, float]:
        return {**mean_metrics(history), "lr": self.engine.get_lr()[0]}


def train_loop(update: StepFn, dataset: Dataset, collate_fn, batch_size: int,
               evaluate: Callable[[], Dict[str, float]], args, rank: int, world_size: int, metric_logger, *,
               engines: Dict[str, Any], prefix: Optional[str], accumulation: int = 1,
               stateful: Optional[Dict[str, Any]] = None, summarize: Optional[Summarize] = None,
               on_log: Optional[Callable[[int], None]] = None) -> Dict[str, float]:
    """Run ``update`` over ``--num_train_epochs`` of ``dataset`` (``batch_size`` rows per process) until the
    ``--max_steps`` / last optimizer step; returns the final evaluation metrics.

    ``engines`` (``{name: engine}``) and the ``state_dict()`` of each ``stateful`` object (e.g. a termination rule
    with its own generator) form one all-or-nothing checkpoint every ``--save_steps``
    (:func:`dschat.training.checkpoint.save_checkpoint`), restored with ``--resume``; ``metrics.jsonl`` then drops the
    rows of the steps that are re-run. A non-finite loss (``NonFiniteError`` from ``update``) stops the run with
    one line naming the step, before the update. Every ``--log_steps`` optimizer steps (and at the last)
    ``summarize(history)`` of the step outputs since the last log is logged, keys under ``{prefix}/`` (as they
    are when ``prefix`` is None), and ``on_log(step)`` runs. Evaluation runs at the start of a fresh run, every
    ``--eval_steps`` and at the end.

    Before anything, ``--output_dir`` must have room for one checkpoint (one line otherwise). Each checkpoint's
    manifest records ``args``; ``--resume`` verifies the files and compares the configuration (:func:`resume`).
    SIGTERM / SIGINT from here until the last step (resume and evaluations included) finish the current optimizer step, save a
    complete checkpoint and raise :class:`~dschat.training.faults.RunInterrupted` (one line; exit status 128 + the
    signal number).
    """
    summarize = summarize or mean_metrics
    total_steps = training_steps(args, len(dataset), batch_size, world_size, accumulation)
    per_epoch = batches_per_epoch(len(dataset), world_size, batch_size)
    stateful = stateful or {}
    require_checkpoint_space(args.output_dir, engines)
    device = next(iter(engines.values())).device  # where the processes agree on stopping
    state = TrainState()

    def log_eval() -> Dict[str, float]:
        metrics = evaluate()
        metric_logger.log(state.global_step, {f"eval/{k}": v for k, v in metrics.items()})
        return metrics

    def named(metrics: Dict[str, float]) -> Dict[str, float]:
        return metrics if prefix is None else {f"{prefix}/{k}": v for k, v in metrics.items()}

    def save() -> str:
        return save_checkpoint(args.output_dir, engines, state,
                               {name: obj.state_dict() for name, obj in stateful.items()}, config_record(args))

    with StopRequests() as stop:
        if args.resume:
            state = resume(args, engines, stateful, metric_logger) or state
        if state.global_step == 0:
            log_eval()
        history: list = []
        progress = tqdm(total=total_steps, initial=state.global_step, desc=prefix or "train",
                        disable=args.no_progress_bar or not is_main_process())
        while state.global_step < total_steps:
            loader = make_loader(dataset, collate_fn, batch_size, args.seed, state.epoch, rank, world_size,
                                 skip_batches=state.batch_in_epoch)
            for batch in loader:
                try:
                    history.append(update(batch))
                except NonFiniteError as err:
                    raise stopped_at(err, state.global_step + 1, args.output_dir) from None
                state.batch_in_epoch += 1
                if (state.epoch * per_epoch + state.batch_in_epoch) % accumulation:
                    continue
                state.global_step += 1
                progress.update(1)
                if state.global_step % args.log_steps == 0 or state.global_step == total_steps:
                    metric_logger.log(state.global_step, named(summarize(history)))
                    history = []
                    if on_log is not None:
                        on_log(state.global_step)
                if state.global_step >= total_steps:
                    break
                if args.eval_steps and state.global_step % args.eval_steps == 0:
                    log_eval()
                saved = args.save_steps and state.global_step % args.save_steps == 0
                if saved:
                    save()
                signum = stop.requested(device)
                if signum:
                    progress.close()
                    tag = save() if not saved else f"step{state.global_step}"
                    raise RunInterrupted(
                        f"{signal.Signals(signum).name} received: finished step {state.global_step} and saved the "
                        f"complete checkpoint {checkpoint_dir(args.output_dir)}/{tag}; continue with --resume "
                        f"(exit status {128 + signum})", signum)
            else:
                state.epoch += 1
                state.batch_in_epoch = 0
        progress.close()
    return log_eval()


def resume(args, engines: Dict[str, Any], stateful: Dict[str, Any], metric_logger) -> Optional[TrainState]:
    """``--resume``: the newest intact checkpoint (files verified against its manifest), its configuration
    compared with ``args`` (an experiment-defining change refused unless ``--allow_config_change``, then logged
    and written to the metrics), its engines, RNG and ``stateful`` objects restored; None when there is none.
    A ``stateful`` object the checkpoint has no state for (e.g. ``--termination randomized`` over a fixed-rule
    run, accepted with ``--allow_config_change``) starts fresh, and says so; so does a run with no checkpoint."""
    chosen = resumable_checkpoint(args.output_dir, next(iter(engines.values())).device)
    if chosen is None:
        if is_main_process():
            print(f"--resume: no checkpoint in {checkpoint_dir(args.output_dir)}; starting from step 0", flush=True)
        return None
    changes = check_resume_config(chosen[1].get("config"), args, args.allow_config_change, chosen[0])
    state, extra = load_checkpoint(args.output_dir, engines, chosen)
    for name, obj in stateful.items():
        if name in extra:
            obj.load_state_dict(extra[name])
        else:
            logger.warning("checkpoint %s has no state for the %s (its run had none); it starts fresh", chosen[0],
                           name)
    metric_logger.resume_at(state.global_step)
    if changes:
        logger.warning("--allow_config_change: resuming %s with changed experiment flags: %s (optimizer and "
                       "scheduler states continue from the checkpoint)", chosen[0], "; ".join(changes))
        metric_logger.log_record(state.global_step, {CHANGES_KEY: "; ".join(changes)})
    return state
