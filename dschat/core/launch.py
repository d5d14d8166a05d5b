"""What the launcher (deepspeed, torchrun, or plain ``python``) says about the processes of this run, read from
its environment without importing torch, so that the resolver and the pre-flight can use it."""
from __future__ import annotations

import os

from dschat.core.config import ConfigError


def launch_world_size() -> int:
    """The number of processes of this launch: ``$WORLD_SIZE`` (set by deepspeed and torchrun), else 1 (plain
    ``python``, as ``dschat.core.distributed.init_distributed`` starts it)."""
    text = os.environ.get("WORLD_SIZE", "1")
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"WORLD_SIZE {text}: expected a positive integer (the number of processes)")
    return int(text)


def local_rank() -> int:
    """This process's rank on its node: ``$LOCAL_RANK`` (set by deepspeed and torchrun), else 0."""
    return int(os.environ.get("LOCAL_RANK", 0))


def local_world_size(world_size: int) -> int:
    """The processes on this node: ``$LOCAL_WORLD_SIZE`` (set by deepspeed and torchrun), else all of them."""
    text = os.environ.get("LOCAL_WORLD_SIZE", str(world_size))
    return int(text) if text.isdigit() and int(text) > 0 else world_size
