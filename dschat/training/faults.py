"""Guards that keep non-finite numbers out of updates, checkpoints and saved models, the error a run stops
with when it meets one (or a full disk): one line, never a traceback, never a NaN file on disk -- and the stop
requests (SIGTERM, SIGINT) a run honours at a step boundary, after a complete checkpoint."""
from __future__ import annotations

import signal
import threading
from typing import Optional

import torch

from dschat.core.distributed import all_reduce_max


class RunStopped(RuntimeError):
    """The run stopped on purpose; the message (one line) says where and why. ``run_cli`` prints it."""


class NonFiniteError(RunStopped):
    """A loss or reward that must not be trained on is NaN or infinite; ``hint`` says what may help."""

    def __init__(self, message: str, hint: str = "a lower learning rate may help"):
        super().__init__(message)
        self.hint = hint


class RunInterrupted(RunStopped):
    """The run stopped on a signal after writing a complete checkpoint; it exits with status
    ``128 + signal number`` (143 for SIGTERM, 130 for SIGINT), as a process ended by that signal does."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_status = 128 + signum


class StopRequests:
    """While active (a context manager), SIGTERM and SIGINT -- what SLURM and Kubernetes send before a kill,
    and Ctrl-C -- only record that a stop was asked for; the training loop polls :meth:`requested` at each
    optimizer-step boundary, saves a checkpoint and stops. A second signal acts at once (the previous handlers
    are back after the first). Installs nothing outside the main thread."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self) -> "StopRequests":
        self.received: Optional[int] = None
        self.previous: dict = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = {signum: signal.signal(signum, self._record) for signum in self.SIGNALS}
        return self

    def _record(self, signum, frame) -> None:
        self.received = signum
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def __exit__(self, *exc) -> None:
        self._restore()

    def requested(self, device=None) -> int:
        """The signal number received on any process (0 for none): every process stops at the same step."""
        return int(all_reduce_max(torch.tensor(float(self.received or 0), device=device)).item())


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
