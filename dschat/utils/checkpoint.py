"""Checkpoints: resumable, all-or-nothing checkpoints of a set of DeepSpeed engines (models, optimizers,
schedulers) with the trainer state (data position) and RNG, and final models in plain HF format that
``transformers`` loads. Neither is ever written with non-finite weights.

Layout: ``{output_dir}/checkpoints/step{N}/{engine name}/...`` (DeepSpeed's files), ``trainer_state_rank{r}.pt``
and ``complete.json`` (the commit marker), and ``checkpoints/latest`` naming the newest complete step."""
from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Tuple

import torch
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine

from .data.tokenized import with_sequence_layout
from .distributed import barrier, is_main_process
from .faults import RunStopped, any_rank, engine_weights_finite
from .seeding import rng_state, set_rng_state

logger = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Where a run is: epochs done, batches consumed in the current epoch, optimizer steps taken."""

    epoch: int = 0
    batch_in_epoch: int = 0
    global_step: int = 0


def checkpoint_dir(output_dir: str) -> str:
    return os.path.join(output_dir, "checkpoints")


MANIFEST = "complete.json"
"""Written last into a step directory before it is renamed into place: a step directory is complete iff it
holds this file (and its name has no staging suffix)."""
STAGING = ".partial"
_STEP_DIR = re.compile(r"^step(\d+)$")


class CheckpointSaveError(RunStopped):
    """A checkpoint could not be written (full disk, I/O error); the partial step was removed."""


class DurableCheckpointEngine(TorchCheckpointEngine):
    """DeepSpeed's torch checkpoint engine, writing through a Python file that is fsync'ed: a failed write
    raises ``OSError`` with its errno (torch's own writer reports a full disk as ``basic_ios::clear: iostream
    error``), and a committed checkpoint's files are on disk before its commit rename."""

    def save(self, state_dict, path: str):
        durable_torch_save(state_dict, path, zipfile=self.zipfile_serialization)


def durable_torch_save(obj, path: str, zipfile: bool = True) -> None:
    """``torch.save`` through a Python file, fsync'ed (errors carry their errno)."""
    with open(path, "wb") as handle:
        torch.save(obj, handle, _use_new_zipfile_serialization=zipfile)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (write a sibling, fsync, rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def complete_checkpoints(output_dir: str) -> list:
    """``[(step, path)]`` of the complete checkpoints under ``output_dir``, oldest first."""
    root = checkpoint_dir(output_dir)
    found = []
    for name in os.listdir(root) if os.path.isdir(root) else []:
        match = _STEP_DIR.match(name)
        if match and os.path.exists(os.path.join(root, name, MANIFEST)):
            found.append((int(match.group(1)), os.path.join(root, name)))
    return sorted(found)


def incomplete_checkpoints(output_dir: str) -> list:
    """Step directories that were never committed (a save killed or failed half-way)."""
    root = checkpoint_dir(output_dir)
    complete = {path for _, path in complete_checkpoints(output_dir)}
    return sorted(os.path.join(root, name) for name in (os.listdir(root) if os.path.isdir(root) else [])
                  if name.startswith("step") and os.path.join(root, name) not in complete)


def _rank_state_file(step_dir: str, rank: int) -> str:
    return os.path.join(step_dir, f"trainer_state_rank{rank}.pt")


def _describe_save_failure(err: OSError, tag: str, path: str, previous: Optional[str]) -> str:
    kept = f"the previous checkpoint {previous} is kept" if previous else "there is no earlier checkpoint"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        reason = "no space left on device"
    else:
        reason = err.strerror or str(err)
    return f"could not save checkpoint {tag} to {path}: {reason}; the partial step was removed and {kept}"


def save_checkpoint(output_dir: str, engines: Mapping[str, object], state: TrainState,
                    extra: Optional[dict] = None) -> str:
    """Save every engine in ``engines`` (name -> DeepSpeed engine), the trainer state, this process's RNG and
    ``extra`` (per-process, e.g. a termination rule's generator) as ONE checkpoint ``checkpoints/step{N}``.

    Everything is written into ``step{N}.partial`` and fsync'ed; then the main process writes the manifest
    and renames the directory into place (atomic), and only then points ``latest`` at it. A kill at any
    moment leaves either the new complete step or none (the previous one stays ``latest``). A failed write
    (full disk) removes the partial step and raises :class:`CheckpointSaveError` naming the path.
    Refuses (``RunStopped``) to save an engine with non-finite weights. Returns the step tag.
    """
    tag = f"step{state.global_step}"
    root = checkpoint_dir(output_dir)
    staging, final = os.path.join(root, tag + STAGING), os.path.join(root, tag)
    previous = latest_checkpoint(output_dir)
    for name, engine in engines.items():
        if not engine_weights_finite(engine):
            raise RunStopped(f"step {state.global_step}: the {name} has non-finite weights; checkpoint {tag} not "
                             f"saved (latest stays {previous or 'none'})")
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    failure = None
    try:
        if is_main_process():
            shutil.rmtree(staging, ignore_errors=True)
            os.makedirs(staging)
        barrier()
        for name, engine in engines.items():
            if not isinstance(engine.checkpoint_engine, DurableCheckpointEngine):
                engine.checkpoint_engine = DurableCheckpointEngine(engine._config)
            engine.save_checkpoint(staging, tag=name, client_state={}, save_latest=False)
        durable_torch_save({"train_state": asdict(state), "rng": rng_state(), "extra": extra or {}},
                           _rank_state_file(staging, rank))
    except OSError as err:
        failure = err
    if any_rank(failure is not None):
        if is_main_process():
            shutil.rmtree(staging, ignore_errors=True)
        barrier()
        failure = failure or OSError(errno.EIO, "another process failed to write its part")
        raise CheckpointSaveError(_describe_save_failure(failure, tag, staging, previous)) from None
    if is_main_process():
        try:
            manifest = {"step": state.global_step, "engines": sorted(engines), "train_state": asdict(state),
                        "world_size": torch.distributed.get_world_size() if torch.distributed.is_initialized()
                        else 1}
            _write_atomically(os.path.join(staging, MANIFEST), json.dumps(manifest))
            _fsync_dir(staging)
            shutil.rmtree(final, ignore_errors=True)  # a re-run of an already saved step replaces it
            os.rename(staging, final)
            _fsync_dir(root)
            _write_atomically(os.path.join(root, "latest"), tag)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)
            failure = err
    if any_rank(failure is not None):
        raise CheckpointSaveError(_describe_save_failure(failure or OSError(errno.EIO, "commit failed"), tag,
                                                         staging, previous)) from None
    logger.info("saved checkpoint %s (%s)", final, ", ".join(engines))
    return tag


def latest_checkpoint(output_dir: str) -> Optional[str]:
    """Path of the newest complete checkpoint, or None."""
    complete = complete_checkpoints(output_dir)
    return complete[-1][1] if complete else None


def load_checkpoint(output_dir: str, engines: Mapping[str, object]) -> Optional[tuple]:
    """Resume from the newest complete checkpoint: load every engine, restore the RNG; returns
    ``(TrainState, extra)`` or None when there is none. Incomplete steps are reported and never loaded; a
    checkpoint that lacks one of ``engines`` is refused (ValueError naming it)."""
    for path in incomplete_checkpoints(output_dir):
        logger.warning("ignoring incomplete checkpoint %s (its save did not finish)", path)
    path = latest_checkpoint(output_dir)
    if path is None:
        return None
    with open(os.path.join(path, MANIFEST)) as handle:
        manifest = json.load(handle)
    if set(manifest["engines"]) != set(engines):
        raise ValueError(f"--resume: checkpoint {path} holds {manifest['engines']} but this run trains "
                         f"{sorted(engines)}")
    for name, engine in engines.items():
        loaded, _ = engine.load_checkpoint(path, tag=name)
        if loaded is None:
            raise ValueError(f"--resume: could not load the {name} from checkpoint {path}")
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    saved = torch.load(_rank_state_file(path, rank), weights_only=False)
    set_rng_state(saved["rng"])
    if is_main_process():
        print(f"resuming from checkpoint {path} (step {manifest['step']}: {', '.join(sorted(engines))})",
              flush=True)
    return TrainState(**saved["train_state"]), saved["extra"]


def _full_state_dict(engine) -> Optional[dict]:
    """The whole model's weights on the main process (gathered across ZeRO-3 shards)."""
    if engine.zero_optimization_stage() == 3:
        return engine._zero3_consolidated_16bit_state_dict()
    return engine.module.state_dict() if is_main_process() else None


def cpu_copy(state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """A CPU copy of ``state_dict`` in which entries that share one tensor (tied weights: SmolLM2's lm_head is its
    input embedding) still share one copy, so ``save_pretrained`` stores it once and the saved checkpoint loads
    with nothing unexpected (copying each entry apart would write the lm_head a second time)."""
    copies: Dict[Tuple[int, torch.Size], torch.Tensor] = {}
    return {key: copies.setdefault((value.data_ptr(), value.shape), value.detach().cpu().clone())
            for key, value in state_dict.items()}


def save_hf_model(engine, tokenizer, out_dir: str) -> None:
    """Save ``engine``'s model as a plain HF checkpoint (LoRA adapters merged in; ``config.pad_token_id`` set, so
    ``*ForSequenceClassification`` pools the last non-pad token for either padding side) plus its tokenizer,
    whose plain call gives the layout the model was trained on (``with_sequence_layout``): ``[bos] + text`` for
    a causal LM (a prompt to continue), ``[bos] + text + [eos]`` for a scalar-head model (a sequence scored at
    its eos). Refuses (``RunStopped``) a model with non-finite weights."""
    if not engine_weights_finite(engine):
        raise RunStopped(f"the model has non-finite weights; not saving it to {out_dir}")
    state_dict = _full_state_dict(engine)
    if is_main_process():
        model = engine.module
        if hasattr(model, "merge_and_unload"):  # peft LoRA: merge a copy so training could go on
            import copy

            model = copy.deepcopy(model).merge_and_unload()
            state_dict = model.state_dict()
        os.makedirs(out_dir, exist_ok=True)
        state_dict = cpu_copy(state_dict)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(out_dir, state_dict=state_dict, safe_serialization=True)
        scores_sequences = type(model).__name__.endswith("ForSequenceClassification")
        with_sequence_layout(tokenizer, eos=scores_sequences).save_pretrained(out_dir)
        logger.info("saved HF model to %s", out_dir)
    barrier()
