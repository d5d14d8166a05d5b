"""How the trainer's weights reach its rollout producer (``--rollout_transport``), one class per transport, each
with the trainer's side (:meth:`send`) and the producer's (:meth:`receive`). The producer handles its messages in
order (:mod:`.producer`), so a version's tensors always arrive before the ``("version", v)`` message that
completes it, whichever transport carried them.

- ``queue``: the tensors travel in the request queue itself (``torch.multiprocessing``: copied once into shared
  memory, the producer maps them). CPU placement only.
- ``collective``: a two-member process group per trainer process — the trainer (member 0) and its producer
  (member 1), joined through a ``torch.distributed.TCPStore`` the trainer opens on a free port — independent of
  the run's own group. The request queue carries only each group's names, shapes and dtypes; the tensors go by
  ``broadcast`` from member 0: NCCL when the producer owns GPUs (``--rollout_gpus``: device to device, no host
  copy), gloo on CPU, where the same protocol is tested. Every broadcast waits at most ``--rollout_timeout``
  seconds: a producer that stopped receiving ends the run in one line, never a hang.

vLLM's own weight-transfer API (``vllm.distributed.weight_transfer``) also broadcasts over NCCL, to vLLM's workers
directly; the producer here owns its engine in its own process and loads what it receives with the engine's own
``load_weights`` (keep-and-repack for vLLM, exact on every machine tried), so one transport serves both engines.
"""
from __future__ import annotations

import re
from datetime import timedelta
from typing import Iterable, List, Sequence, Tuple

import torch
import torch.distributed as dist

from dschat.training.faults import RunStopped

Named = Sequence[Tuple[str, torch.Tensor]]
HOST = "127.0.0.1"
"""A producer runs on its trainer process's node: the rendezvous is local."""


class QueueWeights:
    """Tensors through the request queue (module docstring)."""

    def __init__(self, requests):
        self.requests = requests

    def producer_args(self) -> dict:
        return {}

    def connect(self) -> None:
        """Nothing to join: the queue exists before the producer starts."""

    def send(self, groups: Iterable[Named], version: int) -> None:
        for group in groups:
            self.requests.put(("weights", [(name, tensor.detach().to("cpu", copy=True)) for name, tensor in group]))
        self.requests.put(("version", version))

    @staticmethod
    def receive(message) -> List[Tuple[str, torch.Tensor]]:
        return message[1]

    def close(self) -> None:
        """Nothing to release."""


def pair_group(store: dist.Store, member: int, backend: str, timeout: float):
    """The two-member process group (trainer 0, producer 1) over ``store``: gloo or NCCL."""
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timedelta(seconds=timeout)
        return dist.ProcessGroupNCCL(store, member, 2, options)
    return dist.ProcessGroupGloo(store, member, 2, timedelta(seconds=timeout))


def first_line(err: BaseException) -> str:
    """An error's first line without the library's ``[file:line]`` source locations."""
    return re.sub(r"\[[^\]]*\]\s*", "", str(err).splitlines()[0] if str(err) else type(err).__name__)[:200]


def broadcast(group, tensor: torch.Tensor, timeout: float, what: str) -> None:
    """Broadcast ``tensor`` from member 0, waiting at most ``timeout`` seconds (one line when it does not end)."""
    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = 0, 0
    try:
        group.broadcast([tensor], options).wait(timedelta(seconds=timeout))
    except RuntimeError as err:
        raise RunStopped(f"the weight transfer to the rollout producer ({what}) did not finish in {timeout:g} s "
                         f"(--rollout_timeout): {first_line(err)}") from None


class CollectiveWeights:
    """Tensors by broadcast in a trainer-producer process group (module docstring). ``device`` is where the
    trainer's tensors are sent from: a CUDA device for NCCL, CPU for gloo. ``join``: how long the producer may
    take to join (``--rollout_startup_timeout``: it joins first thing, but only once spawned and its imports done;
    a busy machine takes tens of seconds)."""

    def __init__(self, requests, backend: str, timeout: float, join: float, device: torch.device):
        self.requests, self.backend, self.timeout, self.join, self.device = requests, backend, timeout, join, device
        self.store = dist.TCPStore(HOST, 0, 2, True, timedelta(seconds=self.join), wait_for_workers=False)
        self.group = None

    def producer_args(self) -> dict:
        """What the producer needs to join: the store's port and the backend."""
        return {"port": self.store.port, "backend": self.backend}

    def connect(self) -> None:
        """Join the group: blocks until the producer joins, at most ``join`` seconds; each transfer then waits at
        most ``--rollout_timeout``."""
        try:
            self.group = pair_group(self.store, 0, self.backend, self.join)
        except RuntimeError as err:
            raise RunStopped(f"the rollout producer did not join the weight transfer in {self.join:g} s "
                             f"(--rollout_startup_timeout): {first_line(err)}") from None

    def send(self, groups: Iterable[Named], version: int) -> None:
        for group in groups:
            tensors = [(name, tensor.detach().to(self.device).contiguous()) for name, tensor in group]
            self.requests.put(("weights", [(name, tuple(t.shape), t.dtype) for name, t in tensors]))
            for name, tensor in tensors:
                broadcast(self.group, tensor, self.timeout, name)
        self.requests.put(("version", version))

    def close(self) -> None:
        self.group = None


class CollectiveReceiver:
    """The producer's side of :class:`CollectiveWeights`: joins the group as member 1 and receives each announced
    group of tensors onto ``device``."""

    def __init__(self, port: int, backend: str, timeout: float, join: float, device: torch.device):
        store = dist.TCPStore(HOST, port, 2, False, timedelta(seconds=join))
        self.group, self.timeout, self.device = pair_group(store, 1, backend, join), timeout, device

    def receive(self, message) -> List[Tuple[str, torch.Tensor]]:
        received = []
        for name, shape, dtype in message[1]:
            tensor = torch.empty(shape, dtype=dtype, device=self.device)
            broadcast(self.group, tensor, self.timeout, name)
            received.append((name, tensor))
        return received

