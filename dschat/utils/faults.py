"""Guards that keep non-finite numbers out of updates, checkpoints and saved models, and the error a run stops
with when it meets one (or a full disk): one line, never a traceback, never a NaN file on disk."""
from __future__ import annotations

import torch

from .distributed import all_reduce_max


class RunStopped(RuntimeError):
    """The run stopped on purpose; the message (one line) says where and why. ``run_cli`` prints it."""


class NonFiniteError(RunStopped):
    """A loss or reward that must not be trained on is NaN or infinite."""


def any_rank(flag: bool, device=None) -> bool:
    """True when ``flag`` holds on any process (so every process takes the same branch around collectives)."""
    return bool(all_reduce_max(torch.tensor(float(flag), device=device)).item())


def is_finite(value: torch.Tensor) -> bool:
    """True when every element of ``value`` is finite, on every process."""
    return not any_rank(not bool(torch.isfinite(value.detach()).all()), value.device)


def require_finite(value: torch.Tensor, what: str) -> None:
    """Raise :class:`NonFiniteError` (on every process alike) unless ``value`` is finite everywhere."""
    if not is_finite(value):
        shown = f" ({value.item()})" if value.numel() == 1 else ""
        raise NonFiniteError(f"non-finite {what}{shown}")


def nonfinite_rows(scores: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: samples whose score is NaN or ±inf (a reward that cannot be trained on)."""
    return ~torch.isfinite(scores)


def _local_shards(engine):
    """This process's share of ``engine``'s weights (its ZeRO-3 partition, or the whole tensors)."""
    for param in engine.module.parameters():
        yield param.ds_tensor if hasattr(param, "ds_tensor") else param


def engine_weights_finite(engine) -> bool:
    """True when every weight of ``engine`` is finite (checked shard by shard, agreed across processes)."""
    local_ok = all(bool(torch.isfinite(shard.detach()).all()) for shard in _local_shards(engine))
    return not any_rank(not local_ok, engine.device)
