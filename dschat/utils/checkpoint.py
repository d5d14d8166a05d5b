"""Checkpoints: resumable DeepSpeed checkpoints (model, optimizer, scheduler, data position, RNG) and final
models in plain HF format that ``transformers`` loads."""
from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import Optional

from .distributed import barrier, is_main_process
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


def save_resumable(engine, output_dir: str, state: TrainState, extra: Optional[dict] = None) -> str:
    """Save a DeepSpeed checkpoint tagged ``step{N}`` (DeepSpeed writes ``latest`` pointing at it)."""
    tag = f"step{state.global_step}"
    client_state = {"train_state": asdict(state), "rng": rng_state(), "extra": extra or {}}
    engine.save_checkpoint(checkpoint_dir(output_dir), tag=tag, client_state=client_state)
    return tag


def load_resumable(engine, output_dir: str) -> Optional[tuple]:
    """Load the latest checkpoint into ``engine``; returns ``(TrainState, extra)`` or None when there is none."""
    directory = checkpoint_dir(output_dir)
    if not os.path.exists(os.path.join(directory, "latest")):
        return None
    path, client_state = engine.load_checkpoint(directory)
    if path is None:
        raise RuntimeError(f"--resume: could not load the checkpoint named in {directory}/latest")
    set_rng_state(client_state["rng"])
    logger.info("resumed from %s", path)
    return TrainState(**client_state["train_state"]), client_state.get("extra", {})


def _full_state_dict(engine) -> Optional[dict]:
    """The whole model's weights on the main process (gathered across ZeRO-3 shards)."""
    if engine.zero_optimization_stage() == 3:
        return engine._zero3_consolidated_16bit_state_dict()
    return engine.module.state_dict() if is_main_process() else None


def save_hf_model(engine, tokenizer, out_dir: str) -> None:
    """Save ``engine``'s model as a plain HF checkpoint (LoRA adapters merged in) plus its tokenizer."""
    state_dict = _full_state_dict(engine)
    if is_main_process():
        model = engine.module
        if hasattr(model, "merge_and_unload"):  # peft LoRA: merge a copy so training could go on
            import copy

            model = copy.deepcopy(model).merge_and_unload()
            state_dict = model.state_dict()
        os.makedirs(out_dir, exist_ok=True)
        state_dict = {key: value.detach().cpu().clone() for key, value in state_dict.items()}
        model.save_pretrained(out_dir, state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
        logger.info("saved HF model to %s", out_dir)
    barrier()
