"""Checks of ``--output_dir`` before any work: that it can be written (before models are loaded) and that it has
room for one checkpoint of the engines a run trains (before the first step), so a read-only or nearly full
directory is one line at the start, not a traceback at the first write or a failed save hours later."""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from typing import Mapping

from dschat.core.config import ConfigError
from .faults import RunStopped, any_rank
from .memory_plan import checkpoint_bytes as weights_checkpoint_bytes



def nearest_existing(path: str) -> str:
    """``path`` (absolute) if it exists, else its nearest existing ancestor."""
    path = os.path.abspath(path)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def require_writable(output_dir: str) -> None:
    """Write (then remove) a probe file in ``output_dir``, or, while it does not exist yet, in its nearest existing
    ancestor (where the run will create it); ConfigError (one line) when it cannot. Nothing is left behind: the
    run creates the folder once its start-up checks passed (``write_run_config``)."""
    probed = nearest_existing(output_dir)
    try:
        if not os.path.isdir(probed):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), probed)
        with tempfile.NamedTemporaryFile(dir=probed, prefix=".write_probe"):
            pass
    except OSError as err:
        reason = os.strerror(err.errno) if err.errno else str(err)
        raise ConfigError(f"--output_dir {output_dir}: not writable ({reason}); choose a directory this user can "
                          "write") from None


def _weights(module):
    for param in module.parameters():
        numel = param.ds_numel if hasattr(param, "ds_numel") else param.numel()
        yield numel, param.element_size(), param.requires_grad


def checkpoint_bytes(engine) -> int:
    """Estimated bytes of one engine's checkpoint: every weight in its dtype, and for each trained weight Adam's
    two fp32 moments (plus an fp32 master copy when the weights are not fp32)."""
    return sum(weights_checkpoint_bytes(numel, numel if trained else 0, size)
               for numel, size, trained in _weights(engine.module))


def _megabytes(count: int) -> str:
    return f"{count / 2 ** 20:.1f} MiB"


def require_checkpoint_space(output_dir: str, engines: Mapping[str, object]) -> None:
    """Stop (``RunStopped``, one line) unless ``output_dir`` (or, not created yet, its nearest existing ancestor)
    has free space for one checkpoint of ``engines`` (estimated by :func:`checkpoint_bytes`), on every process."""
    needed = sum(checkpoint_bytes(engine) for engine in engines.values())
    free = shutil.disk_usage(nearest_existing(output_dir)).free
    if any_rank(free < needed, next(iter(engines.values())).device):
        raise RunStopped(f"--output_dir {output_dir}: {_megabytes(free)} free, but one checkpoint of the "
                         f"{', '.join(engines)} needs about {_megabytes(needed)}; free some space or choose "
                         "another --output_dir")
