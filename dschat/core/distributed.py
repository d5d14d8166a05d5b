"""Process-group setup that works the same under plain ``python``, ``torchrun`` and ``deepspeed``."""
from __future__ import annotations

import os
import socket

import torch

from .compile_lock import check_compile_locks
from .launch import local_rank

SHM_COMM_OP = "deepspeed_shm_comm"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_distributed() -> tuple:
    """Initialise torch.distributed (nccl on GPU, gloo on CPU) and return ``(rank, world_size, device)``.

    Under plain ``python`` the rank variables are absent; we set a one-process world so DeepSpeed does not
    try MPI discovery. On CPU, DeepSpeed's shared-memory all-reduce op is switched off: its communication backend
    would compile it (C++, 40 s to minutes) at every fresh start only for ``inference_all_reduce``, which training
    never calls; gloo does every collective. Extension build locks are checked first (:mod:`.compile_lock`).
    """
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
    import deepspeed
    import deepspeed.ops

    check_compile_locks()

    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())
        device = torch.device("cuda", local_rank())
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
        deepspeed.ops.__compatible_ops__[SHM_COMM_OP] = False  # the probe's result is cached: edits persist
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend=backend)
    return torch.distributed.get_rank(), torch.distributed.get_world_size(), device


def is_main_process() -> bool:
    return not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0


def barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """Mean of a tensor over all processes (identity with one process)."""
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        value = value.clone()
        torch.distributed.all_reduce(value)
        value /= torch.distributed.get_world_size()
    return value


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """Sum of a tensor over all processes (identity with one process)."""
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        value = value.clone()
        torch.distributed.all_reduce(value)
    return value


def all_reduce_max(value: torch.Tensor) -> torch.Tensor:
    """Maximum of a tensor over all processes (identity with one process)."""
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        value = value.clone()
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return value
