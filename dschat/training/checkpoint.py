"""Checkpoints: resumable, all-or-nothing checkpoints of a set of DeepSpeed engines (models, optimizers,
schedulers) with the trainer state (data position) and RNG, and final models in plain HF format that
``transformers`` loads. Neither is ever written with non-finite weights.

Layout: ``{output_dir}/checkpoints/step{N}/{engine name}/...`` (DeepSpeed's files), ``trainer_state_rank{r}.pt``
and ``complete.json`` (the commit marker and manifest: every file's size and SHA-256, and the resolved
configuration of the run), and ``checkpoints/latest`` naming the newest complete step. Resuming verifies the
files against the manifest and falls back to the previous complete checkpoint when one does not match; the
configuration is compared by :mod:`dschat.training.resume_config`."""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Tuple

import torch
from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine
from safetensors import SafetensorError

from dschat.data.tokenized import with_sequence_layout
from dschat.core.distributed import barrier, is_main_process
from .faults import RunStopped, any_rank, engine_weights_finite
from dschat.core.seeding import rng_state, set_rng_state

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
    """A checkpoint could not be written (full disk, quota, I/O error, read-only); the partial step was removed."""


class DurableCheckpointEngine(TorchCheckpointEngine):
    """DeepSpeed's torch checkpoint engine, writing through a Python file that is fsync'ed: a failed write
    raises ``OSError`` with its errno (torch's own writer reports a full disk as ``basic_ios::clear: iostream
    error`` or ``unexpected pos``), and a committed checkpoint's files are on disk before its commit rename."""

    def save(self, state_dict, path: str):
        durable_torch_save(state_dict, path, zipfile=self.zipfile_serialization)


class _RecordingFile:
    """A binary file that remembers its first failed write: torch's zip writer turns the ``OSError`` of a
    failed write into a ``RuntimeError`` without its errno, and this keeps the real cause."""

    def __init__(self, handle):
        self.handle = handle
        self.error: Optional[OSError] = None

    def write(self, data):
        try:
            return self.handle.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self):
        self.handle.flush()


_TORCH_WRITE_FAILURES = ("inline_container", "PytorchStreamWriter", "unexpected pos", "file write failed",
                         "iostream error")
"""Markers of a RuntimeError that torch's zip writer raises for a failed write (not a pickling bug)."""


def _as_write_error(err: RuntimeError, recorded: Optional[OSError], path: str) -> Optional[OSError]:
    """The ``OSError`` behind a torch writer ``RuntimeError``: the one the file recorded, else ENOSPC when the
    filesystem is full, else EIO carrying torch's message; None for a RuntimeError that is no write failure."""
    if recorded is not None:
        return recorded
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if not any(marker in str(err) for marker in _TORCH_WRITE_FAILURES):
        return None
    try:
        full = shutil.disk_usage(os.path.dirname(path) or ".").free < (1 << 20)
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    return OSError(errno.EIO, f"write failed ({message})", path)


def durable_torch_save(obj, path: str, zipfile: bool = True) -> None:
    """``torch.save`` through a Python file, fsync'ed; every failed write raises ``OSError`` with its errno
    (also when torch reports it as a ``RuntimeError``)."""
    try:
        with open(path, "wb") as handle:
            recording = _RecordingFile(handle)
            try:
                torch.save(obj, recording, _use_new_zipfile_serialization=zipfile)
            except RuntimeError as err:
                cause = _as_write_error(err, recording.error, path)
                if cause is None:
                    raise
                raise cause from None
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as err:
        if err.filename:
            raise
        raise OSError(err.errno, err.strerror, path) from None  # a buffered write's error names no file


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


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_manifest(step_dir: str) -> dict:
    """``{relative path: {"size", "sha256"}}`` of every file under ``step_dir`` (but the manifest itself)."""
    files = {}
    for root, _, names in os.walk(step_dir):
        for name in names:
            full = os.path.join(root, name)
            relative = os.path.relpath(full, step_dir)
            if relative != MANIFEST:
                files[relative] = {"size": os.path.getsize(full), "sha256": _sha256(full)}
    return files


def _describe_save_failure(err: OSError, tag: str, path: str, previous: Optional[str]) -> str:
    kept = f"the previous checkpoint {previous} is kept" if previous else "there is no earlier checkpoint"
    reason = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
    if err.errno == errno.EIO and err.strerror and err.strerror != os.strerror(errno.EIO):
        reason = err.strerror  # torch's own words for a write that failed without an errno
    reason = reason[:1].lower() + reason[1:]
    where = f" (writing {err.filename})" if err.filename and str(err.filename) != path else ""
    return (f"could not save checkpoint {tag} to {path}: {reason}{where}; the partial step was removed and "
            f"{kept}")


def save_checkpoint(output_dir: str, engines: Mapping[str, object], state: TrainState,
                    extra: Optional[dict] = None, config: Optional[dict] = None) -> str:
    """Save every engine in ``engines`` (name -> DeepSpeed engine), the trainer state, this process's RNG and
    ``extra`` (per-process, e.g. a termination rule's generator) as ONE checkpoint ``checkpoints/step{N}``.

    Everything is written into ``step{N}.partial`` and fsync'ed; then the main process writes the manifest
    (every file's size and SHA-256, and ``config``, the run's resolved configuration) and renames the directory
    into place (atomic), and only then points ``latest`` at it. A kill at any moment leaves either the new
    complete step or none (the previous one stays ``latest``). A failed write (full disk, quota, I/O error,
    read-only filesystem -- also when torch reports it as a ``RuntimeError``) removes the partial step and raises
    :class:`CheckpointSaveError` naming the path and the cause. Refuses (``RunStopped``) to save an engine with
    non-finite weights. Returns the step tag.
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
        renamed = False
        try:
            manifest = {"step": state.global_step, "engines": sorted(engines), "train_state": asdict(state),
                        "world_size": torch.distributed.get_world_size() if torch.distributed.is_initialized()
                        else 1, "files": file_manifest(staging), "config": config}
            _write_atomically(os.path.join(staging, MANIFEST), json.dumps(manifest))
            _fsync_dir(staging)
            shutil.rmtree(final, ignore_errors=True)  # a re-run of an already saved step replaces it
            os.rename(staging, final)
            renamed = True
            _fsync_dir(root)
            _write_atomically(os.path.join(root, "latest"), tag)
        except OSError as err:
            shutil.rmtree(final if renamed else staging, ignore_errors=True)  # `latest` still names `previous`
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


def read_manifest(step_dir: str) -> dict:
    with open(os.path.join(step_dir, MANIFEST)) as handle:
        return json.load(handle)


def checkpoint_problem(step_dir: str) -> Optional[str]:
    """None when ``step_dir`` holds every file its manifest lists, with the recorded size and SHA-256; else what
    is wrong, naming the file. A manifest without file records (saved before they existed) is not checked."""
    try:
        files = read_manifest(step_dir).get("files")
    except (OSError, ValueError) as err:
        return f"{MANIFEST} is unreadable ({type(err).__name__})"
    for relative, expected in sorted((files or {}).items()):
        path = os.path.join(step_dir, relative)
        if not os.path.isfile(path):
            return f"{relative} is missing"
        size = os.path.getsize(path)
        if size != expected["size"]:
            return f"{relative} has {size} bytes, its manifest says {expected['size']}"
        if _sha256(path) != expected["sha256"]:
            return f"{relative} does not match the SHA-256 in its manifest (the file is corrupted)"
    return None


def resumable_checkpoint(output_dir: str, device=None) -> Optional[Tuple[str, dict]]:
    """``(path, manifest)`` of the newest complete checkpoint whose files match its manifest, or None when there
    is no complete checkpoint. Each one that does not match is reported in one line naming the file, and the
    previous one is tried; when none is left the run stops (``RunStopped``, one line). ``device``: where the
    processes agree (the engines' device)."""
    for path in incomplete_checkpoints(output_dir):
        logger.warning("ignoring incomplete checkpoint %s (its save did not finish)", path)
    candidates = [path for _, path in reversed(complete_checkpoints(output_dir))]
    for position, path in enumerate(candidates):
        problem = checkpoint_problem(path)
        if not any_rank(problem is not None, device):
            return path, read_manifest(path)
        problem = problem or "another process found a file that does not match its manifest"
        if position + 1 == len(candidates):
            raise RunStopped(f"--resume: checkpoint {path}: {problem}; no earlier complete checkpoint is left in "
                             f"{checkpoint_dir(output_dir)}, so there is nothing intact to resume from")
        if is_main_process():
            print(f"warning: checkpoint {path}: {problem}; falling back to the previous complete checkpoint "
                  f"{candidates[position + 1]}", file=sys.stderr, flush=True)
    return None


def load_checkpoint(output_dir: str, engines: Mapping[str, object],
                    chosen: Optional[Tuple[str, dict]] = None) -> Optional[tuple]:
    """Resume from ``chosen`` (``(path, manifest)``; default: :func:`resumable_checkpoint`, the newest complete
    checkpoint whose files are intact): load every engine, restore the RNG; returns ``(TrainState, extra)`` or
    None when there is none. Incomplete steps are reported and never loaded; a checkpoint that lacks one of
    ``engines`` is refused (ValueError naming it)."""
    chosen = chosen or resumable_checkpoint(output_dir, next(iter(engines.values())).device)
    if chosen is None:
        return None
    path, manifest = chosen
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
    its eos). Refuses (``RunStopped``) a model with non-finite weights; a failed write (full disk, read-only)
    is one line naming ``out_dir`` and the cause (``RunStopped``)."""
    if not engine_weights_finite(engine):
        raise RunStopped(f"the model has non-finite weights; not saving it to {out_dir}")
    state_dict = _full_state_dict(engine)
    failure = None
    if is_main_process():
        model = engine.module
        if hasattr(model, "merge_and_unload"):  # peft LoRA: merge a copy so training could go on
            import copy

            model = copy.deepcopy(model).merge_and_unload()
            state_dict = model.state_dict()
        state_dict = cpu_copy(state_dict)
        model.config.pad_token_id = tokenizer.pad_token_id
        scores_sequences = type(model).__name__.endswith("ForSequenceClassification")
        try:
            os.makedirs(out_dir, exist_ok=True)
            model.save_pretrained(out_dir, state_dict=state_dict, safe_serialization=True)
            with_sequence_layout(tokenizer, eos=scores_sequences).save_pretrained(out_dir)
        except (OSError, SafetensorError) as err:  # safetensors reports a full disk as its own error
            failure = err
        else:
            logger.info("saved HF model to %s", out_dir)
    if any_rank(failure is not None):
        cause = (os.strerror(failure.errno) if getattr(failure, "errno", None) else str(failure).splitlines()[0]
                 if failure is not None else "another process failed")
        raise RunStopped(f"could not save the model to {out_dir}: {cause}; the resumable checkpoints are "
                         "unaffected (--resume continues from the newest)") from None
    barrier()
