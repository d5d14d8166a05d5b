"""Asynchronous rollouts (``--async_rollout K``): a producer process samples the next K iterations' rollouts
while the trainer updates on the current one (AReaL's ``max_head_offpolicyness``, PRIME-RL's ``max_async_level``,
TRL's ``max_staleness``; ``../shared/reference/async-rollouts.md``).

**Schedule (wait, never drop).** Iteration i trains on rollout i, and rollout i is sampled by policy version
max(0, i − K), where version v is the actor after v updates: the trainer pushes version v's weights right after
update v and at once asks for rollout v + K. The producer handles its messages in order, so the weights a rollout
is sampled with follow from the order of the trainer's messages alone — never from timing — and a rollout is at
most K versions old when it is trained on (``rollout/staleness_*``, logged per iteration). Waiting instead of
dropping and resampling wastes no sampling work, and it makes the run a function of its flags: the same seed gives
the same rollouts whatever the machine's load, and ``--resume`` continues exactly.

**Off-policy correction.** The producer returns the behaviour policy's log-probs of the sampled tokens
(``Rollout.engine_logprobs``: the engine's own, or a forward of the producer's copy in the trainer's convention).
The trainer's old log-probs stay its own forwards of the current actor — the *proximal* policy — so with
``--rollout_is token | macro | sequence`` the policy loss is the decoupled PPO objective (Hilton et al. 2022,
"Batch size-invariance for policy optimization", eq. 2; AReaL, Fu et al. 2025, eq. 5):
E_behav[ min(π_prox/π_behav, C) · min(u·A, clip(u, 1 ± ε)·A) ], u = π_θ/π_prox — the clip around the proximal
policy, the truncated behaviour weight per token, per macro action (the product over its tokens, §3.2.1) or per
sequence (:mod:`dschat.rlhf.macro_action.correction`). Values and advantages come from the trainer's forwards;
the entropy termination rule reads the entropies recorded while sampling, the behaviour policy's.

**Placement and transport.** Each trainer process has a producer of its own (``torch.multiprocessing``, spawn)
running the engine ``--rollout_engine`` names on a plain copy of the actor: on CPU with ``--rollout_threads``
intra-op threads, or on a GPU of the trainer's processes' own (``--rollout_gpus``: the node's producer GPUs, each
holding the producers of as many consecutive ranks; :func:`producer_devices`), which the trainer never touches. Requests
and rollouts travel through two ``torch.multiprocessing`` queues; weights (Hugging Face names, LoRA merged, ZeRO-3
gathered in bounded groups: :func:`.weights.exported_weights`) by ``--rollout_transport`` (:mod:`.transport`):
through the queue in shared memory on CPU, by NCCL broadcast to a GPU producer (gloo on CPU, where that protocol
is tested). Evaluation samples from the actor as it is now, in the trainer's own process.

**Resume and faults.** A checkpoint drains the producer: every rollout asked for is received and saved with the
version that sampled it (:meth:`AsyncRolloutEngine.state_dict`); a resumed run pushes the checkpoint's weights as
the current version and asks for the rest of the schedule, so it continues as an uninterrupted run would. Each
rollout's sampling noise is seeded by (``--seed``, process rank, rollout index). A producer that dies, fails or
sends nothing for ``--rollout_timeout`` seconds ends the run in one line (:class:`~dschat.training.faults.RunStopped`);
that deadline counts from the producer's start-up, which has its own (``--rollout_startup_timeout``: the spawn, the
imports, the model built, the weight transfer joined; tens of seconds on a loaded machine). The producer ignores
SIGTERM / SIGINT (the trainer stops it after its checkpoint); when its trainer is gone (killed), it says so in one
line, releases the queues' semaphores the trainer can no longer release, and exits (:func:`exit_orphaned`).

**Episodes** (``--env``): the producer plays each row's whole multi-turn episode on its engine
(:mod:`.episodes`, the environment built in its process) and sends the episode's masks, scores and statistics with
the rollout; the behaviour log-probs are then those of the replies' tokens only.
"""
from __future__ import annotations

import collections
import contextlib
import io
import os
import queue
import signal
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Optional, Tuple

import torch

from dschat.training.faults import RunStopped

from .base import PlainModel, Rollout, RolloutEngine
from .partial import response_tokens, sample_in_chunks, stale_token, version_stats
from .transport import CollectiveReceiver, CollectiveWeights, QueueWeights
from .weights import exported_weights

Prompts = tuple
"""A rollout's ``(left-padded prompts, prompt mask)``, rows already repeated per sample, and with ``--env`` the
rows' task indices after them."""
POLL_SECONDS = 1.0
"""How often a waiting trainer checks that the producer is alive, and a waiting producer that its parent is."""
SEED_STRIDE = 1_000_003
"""Rollout i of process ``rank`` is sampled under torch seed ``(seed + rank) * SEED_STRIDE + i``."""


@dataclass(frozen=True)
class ProducerSpec:
    """What the producer process builds: its engine (``"hf"`` or ``"vllm"``) on a model of ``config`` (a
    transformers config) in ``dtype`` (``--dtype``: fp32, bf16 or fp16), with the trainer's pad / eos, log-prob
    temperature and threads; on the physical GPU ``devices`` (none: CPU; vLLM there takes
    ``gpu_memory_utilization`` of it), its weights by ``transport``, any transfer waiting at most ``timeout``
    seconds and its start-up (joining the transfer included) at most ``startup_timeout``; ``partial_chunk``:
    ``--partial_rollout_chunk`` with ``--partial_rollout`` (:mod:`.partial`), else 0 (whole responses)."""

    engine: str
    config: object
    dtype: str
    tokenizer: object
    pad_token_id: int
    eos_token_id: int
    logprob_temperature: float
    threads: int
    seed: int
    max_model_len: int = 0
    devices: Tuple[int, ...] = ()
    gpu_memory_utilization: float = 0.3
    transport: str = "queue"
    timeout: float = 600.0
    episodes: Optional[tuple] = None
    """``--env``: ``(environment, tasks, max_turns, max_episode_tokens)``, the producer then plays episodes."""
    startup_timeout: float = 300.0
    partial_chunk: int = 0


def producer_devices(gpus: Tuple[int, ...], local_rank: int, local_world_size: int) -> Tuple[int, ...]:
    """The physical GPU of local rank ``local_rank``'s producer, of the ``local_world_size`` processes on its node:
    ``--rollout_gpus`` (whose count divides them, the resolver checked) in rank order, each holding the producers
    of ``local_world_size / len(gpus)`` consecutive ranks; none: CPU."""
    return (gpus[local_rank * len(gpus) // local_world_size],) if gpus else ()


def rollout_seed(seed: int, index: int) -> int:
    """The torch seed of rollout ``index`` for a process whose run seed (plus rank) is ``seed``."""
    return seed * SEED_STRIDE + index


def _build_engine(spec: ProducerSpec, model: torch.nn.Module) -> RolloutEngine:
    if spec.engine == "vllm":
        from .vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(PlainModel(model), spec.tokenizer, dtype=spec.dtype,
                                 max_model_len=spec.max_model_len, tensor_parallel_size=1,
                                 gpu_memory_utilization=spec.gpu_memory_utilization, world_size=1,
                                 logprobs_at_unit_temperature=spec.logprob_temperature == 1.0,
                                 sleep_between_rollouts=not spec.partial_chunk)
    from .hf import HFRolloutEngine

    return HFRolloutEngine(PlainModel(model), spec.pad_token_id, spec.eos_token_id)


def load_pushed_weights(model: torch.nn.Module, tensors: list) -> None:
    """Copy pushed ``(checkpoint name, tensor)`` pairs into ``model``; a name the model does not have is an
    error (a tied lm_head is pushed once, under the embedding's name)."""
    unexpected = torch.nn.Module.load_state_dict(model, dict(tensors), strict=False).unexpected_keys
    if unexpected:
        raise KeyError(f"pushed weights the producer's model does not have: {unexpected[:3]}")


def behaviour_logprobs(model: torch.nn.Module, rollout: Rollout, prompt_mask: torch.Tensor, eos_token_id: int,
                       temperature: float) -> torch.Tensor:
    """``[B, T-1]`` log-probs of the sampled tokens under the policy that sampled them (the producer's copy), in
    the trainer's convention (log_softmax(logits / T) before top-k / top-p), 0 off the response."""
    from dschat.rlhf.experience import rollout_masks, sequence_logprobs

    attention_mask, action_mask = ((rollout.attention_mask, rollout.action_mask) if rollout.action_mask is not None
                                   else rollout_masks(rollout.seq, prompt_mask, eos_token_id))
    with torch.no_grad():
        logprobs = sequence_logprobs(model, rollout.seq, attention_mask, temperature)
    return logprobs * action_mask


def by_value(*items) -> bytes:
    """A rollout's tensors serialized into the message itself. A tensor put in a ``torch.multiprocessing`` queue
    travels as a shared-memory handle that the reader fetches from the sender's resource-sharer thread while
    unpickling it, which blocks for ever when the sender is stopped (``kill -STOP``) with the message in flight:
    by value, reading a message needs only the pipe, and the trainer's deadline holds."""
    buffer = io.BytesIO()
    torch.save(items, buffer)
    return buffer.getvalue()


def from_value(data: bytes) -> tuple:
    """What :func:`by_value` serialized."""
    return torch.load(io.BytesIO(data))


def queue_semaphores(*queues) -> list:
    """The names of the named semaphores behind ``torch.multiprocessing`` queues (each holds a read lock, a write
    lock and a bounded semaphore; CPython's private attributes, none on platforms without named ones)."""
    locks = [getattr(q, attr, None) for q in queues for attr in ("_rlock", "_wlock", "_sem")]
    return [lock._semlock.name for lock in locks if lock is not None and getattr(lock._semlock, "name", None)]


def exit_orphaned(trainer: int, *queues) -> None:
    """The trainer process ``trainer`` is gone (killed: it ran no clean-up): say so in one line, unlink the named
    semaphores of ``queues`` it created and unregister them from the resource tracker (which would otherwise warn
    of them as leaked when it sees the trainer's end), and exit at once — no queue thread to join (nobody reads the
    results any more), the process's memory and shared-memory handles freed by its end."""
    from multiprocessing import resource_tracker

    from _multiprocessing import sem_unlink

    for name in queue_semaphores(*queues):
        with contextlib.suppress(OSError):
            sem_unlink(name)
        with contextlib.suppress(Exception):
            resource_tracker.unregister(name, "semaphore")
    os.write(2, f"rollout producer {os.getpid()}: its trainer (pid {trainer}) is gone; exiting\n".encode())
    os._exit(0)


def trainer_gone(trainer: int, grace: float = 0.0) -> bool:
    """Whether the process ``trainer`` (this process's parent at its start) has ended: the producer was reparented.
    ``grace``: seconds to keep checking (a broken pipe from a dying trainer may be seen before the reparenting)."""
    deadline = time.monotonic() + grace
    while os.getppid() == trainer:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class Inbox:
    """The producer's requests in the trainer's order; between decode chunks (``--partial_rollout``) the weights
    further on are read ahead (:meth:`read`), and a sample or stop request met on the way waits in ``held``. A
    trainer that is gone ends the producer (:func:`exit_orphaned`)."""

    def __init__(self, requests, results, trainer: int):
        self.requests, self.results, self.trainer, self.held = requests, results, trainer, collections.deque()

    def next(self):
        """The next request: a held one first, else one from the queue (waiting for it)."""
        return self.held.popleft() if self.held else self.read(block=True)

    def read(self, block: bool):
        """The next message of the queue itself; None if ``block`` is false and none is there."""
        while True:
            try:
                return self.requests.get(timeout=POLL_SECONDS) if block else self.requests.get_nowait()
            except queue.Empty:
                if trainer_gone(self.trainer):
                    exit_orphaned(self.trainer, self.requests, self.results)
                if not block:
                    return None
            except (OSError, EOFError):  # a message whose sender died cannot be unpickled (its shared memory went)
                if trainer_gone(self.trainer, grace=POLL_SECONDS):
                    exit_orphaned(self.trainer, self.requests, self.results)
                raise


def producer_main(requests, results, spec: ProducerSpec, link: dict) -> None:
    """The producer process: handle the trainer's messages in order — ``("weights", ...)`` (a group of the next
    version's tensors, or with ``collective`` their names, shapes and dtypes, the tensors following by broadcast;
    ``link`` says how to join it), ``("version", v)`` (that version complete), ``("sample", index, prompts,
    prompt_mask, task indices or None, sampling, record_entropy)``, ``("stop",)`` — after ``("ready",)`` once
    built, answering each sample with ``("rollout", index, (token versions, seq, entropy, logprobs, episode) by
    value, busy seconds, idle seconds)`` (host tensors, :func:`by_value`; ``episode``: an episode batch's
    ``(attention_mask, action_mask, scores, stats)``, else None; with ``partial_chunk``, decoded in chunks and newer
    versions loaded between them, :mod:`.partial`), or ``("error", line)`` once and exit; without a trainer,
    :func:`exit_orphaned`. Its GPUs are the only ones it sees (the trainer started it with ``CUDA_VISIBLE_DEVICES``
    set to them)."""
    from transformers import AutoModelForCausalLM

    from dschat.model.loading import DTYPES

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(spec.threads)
    parent = os.getppid()
    try:
        device = torch.device("cuda", 0) if spec.devices else torch.device("cpu")
        receive = (CollectiveReceiver(link["port"], link["backend"], spec.timeout, spec.startup_timeout,
                                      device).receive
                   if spec.transport == "collective" else QueueWeights.receive)
        model = AutoModelForCausalLM.from_config(spec.config, dtype=DTYPES[spec.dtype]).to(device).eval()
        engine = _build_engine(spec, model)
        runner = None
        if spec.episodes is not None:
            from .episodes import EpisodeRunner

            environment, tasks, max_turns, budget = spec.episodes
            runner = EpisodeRunner(environment, list(tasks), spec.tokenizer, engine, max_turns, budget)
        results.put(("ready",))
        inbox, version, idle_since = Inbox(requests, results, parent), -1, time.perf_counter()

        def take(message) -> bool:
            """Apply a weights or version message (False for any other)."""
            nonlocal version
            if message[0] == "weights":
                load_pushed_weights(model, receive(message))
            elif message[0] == "version":
                version = message[1]
                engine.mark_stale()
            return message[0] in ("weights", "version")

        def between_chunks(score) -> int:
            """--partial_rollout: load the newest version already pushed (once its first group is read, the
            rest of it is waited for), the tokens of the one it replaces scored first; the version then held."""
            loading = False
            while not (inbox.held and inbox.held[-1][0] == "stop"):
                message = inbox.read(block=loading)
                if message is None:
                    break
                if message[0] == "weights" and not loading:
                    score()
                loading = message[0] == "weights"
                if not take(message):
                    inbox.held.append(message)
            return version

        while True:
            message = inbox.next()
            kind = message[0]
            if kind == "stop":
                return
            if take(message):
                continue
            index, prompts, prompt_mask, meta, sampling, record_entropy = message[1:]
            idle = time.perf_counter() - idle_since
            start = time.perf_counter()
            torch.manual_seed(rollout_seed(spec.seed, index))
            prompts, prompt_mask = prompts.to(device), prompt_mask.to(device)
            if runner is not None:
                rollout = runner.run(prompts, prompt_mask, meta, sampling, record_entropy)
            elif spec.partial_chunk:
                rollout = sample_in_chunks(engine, model, prompts, prompt_mask, sampling, spec.partial_chunk,
                                           version, between_chunks, spec.pad_token_id, spec.eos_token_id,
                                           spec.logprob_temperature)
            else:
                rollout = engine.generate(prompts, prompt_mask, sampling, record_entropy)
            if rollout.token_versions is None:  # one version sampled the whole rollout
                rollout.token_versions = torch.full((prompts.shape[0], rollout.seq.shape[1] - prompts.shape[1]),
                                                    version, dtype=torch.long)
            episode = None if rollout.action_mask is None else (
                rollout.attention_mask.cpu(), rollout.action_mask.cpu(), rollout.scores.cpu(), rollout.stats)
            logprobs = rollout.engine_logprobs
            if logprobs is None:
                logprobs = behaviour_logprobs(model, rollout, prompt_mask, spec.eos_token_id,
                                              spec.logprob_temperature)
            entropy = None if rollout.entropy is None else rollout.entropy.cpu()
            results.put(("rollout", index, by_value(rollout.token_versions.cpu(), rollout.seq.cpu(), entropy,
                                                    logprobs.cpu(), episode), time.perf_counter() - start, idle))
            idle_since = time.perf_counter()
    except BaseException as err:  # noqa: BLE001 -- reported to the trainer in one line, then re-raised
        if trainer_gone(parent, grace=POLL_SECONDS):  # e.g. a weight transfer cut by the trainer's death
            exit_orphaned(parent, requests, results)
        results.put(("error", f"{type(err).__name__}: {err}".splitlines()[0]))
        raise


class AsyncRolloutEngine(RolloutEngine):
    """The trainer's side of the producer (module docstring): :meth:`next_rollout` returns the rollout the
    producer sampled for this iteration's prompts, :meth:`mark_stale` pushes the updated actor as the next
    version and asks for the rollout K iterations ahead; :meth:`generate` (evaluation) samples with ``current``,
    an engine on the actor as it is now. ``upcoming(i)`` yields the prompts of iterations i, i + 1, ... in the
    order the training loop will feed them."""

    def __init__(self, actor, current: RolloutEngine, spec: ProducerSpec, ahead: int,
                 upcoming: Callable[[int], Iterator[Prompts]], timeout: float):
        super().__init__(actor)
        self.current, self.spec, self.ahead, self.upcoming, self.timeout = current, spec, ahead, upcoming, timeout
        self.version = 0  # updates applied to the actor
        self.trained = 0  # index of the rollout the next iteration trains on
        self.requested = 0  # rollouts asked for so far
        self.ready: Dict[int, tuple] = {}  # index -> (token versions, seq, entropy, logprobs, episode, busy, idle)
        self.process = None
        self.started = False  # the producer said it is ready (its start-up deadline is over)
        self.prompts: Optional[Iterator[Prompts]] = None
        self.sampling, self.record_entropy = None, False
        self.push_seconds = 0.0

    # -- the trainer's seam ------------------------------------------------------------------------------------
    def generate(self, prompts, prompt_mask, sampling, record_entropy: bool = False) -> Rollout:
        """Evaluation: responses from the actor as it is now (``current``)."""
        return self.current.generate(prompts, prompt_mask, sampling, record_entropy)

    def next_rollout(self, prompts, prompt_mask, sampling, record_entropy: bool) -> Rollout:
        """The rollout this iteration trains on, sampled ahead for exactly these prompts; its ``stats`` give its
        staleness (versions between the sampler and the actor), the trainer's wait for it and the producer's
        idle and busy time before it."""
        if self.process is None:
            self.sampling, self.record_entropy = sampling, record_entropy
            self._start()
        index = self.trained
        start = time.perf_counter()
        versions, seq, entropy, logprobs, episode, busy, idle = self._receive(index)
        waited = time.perf_counter() - start
        if seq.shape[0] != prompts.shape[0] or not torch.equal(seq[:, :prompts.shape[1]].to(prompts.device),
                                                                 prompts):
            raise RunStopped(f"rollout {index}: the producer sampled other prompts than the trainer's iteration "
                             f"{index} (the prompt schedules diverged)")
        on = response_tokens(seq, prompts.shape[1], self.spec.eos_token_id)
        old = stale_token(self.version, versions, on, self.ahead)
        if old is not None:
            raise RunStopped(f"rollout {index}: token {old[1]} of response {old[0]} was sampled by version {old[2]}, "
                             f"more than --async_rollout {self.ahead} versions before the actor's {self.version}")
        measured = version_stats(self.version, versions, on)
        self.trained += 1
        self.last_sync_seconds = 0.0
        stats = {"rollout/staleness_mean": measured.pop("rollout/staleness_mean"),
                 "rollout/staleness_max": measured.pop("rollout/staleness_max"),
                 "timing/wait_for_rollout": waited, "timing/wait_for_trainer": idle,
                 "timing/producer_busy": busy, "timing/weight_sync": self.push_seconds,
                 **(measured if self.spec.partial_chunk else {})}
        device = prompts.device
        attention_mask, action_mask, scores, episode_stats = episode or (None, None, None, {})
        return Rollout(seq.to(device), entropy=None if entropy is None else entropy.to(device),
                       engine_logprobs=logprobs.to(device),
                       stats={key: torch.as_tensor(value) for key, value in {**stats, **episode_stats}.items()},
                       token_versions=versions,
                       **{name: None if tensor is None else tensor.to(device) for name, tensor in (
                           ("attention_mask", attention_mask), ("action_mask", action_mask), ("scores", scores))})

    def mark_stale(self) -> None:
        """The actor was updated: push it as the next version and ask for the rollout K iterations ahead."""
        self.version += 1
        self.current.mark_stale()
        if self.process is not None:
            self._push_weights()
            self._request_up_to(self.trained + self.ahead)

    def close(self) -> None:
        """Stop the producer (after the run, or when it fails)."""
        if self.process is None:
            return
        self.transport.close()
        if self.process.is_alive():
            self.requests.put(("stop",))
            self.process.join(timeout=30)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.process = None

    def state_dict(self) -> dict:
        """Drain: every rollout asked for, received, with the version that sampled each token (module docstring)."""
        for index in range(self.trained, self.requested):
            self._receive(index, keep=True)
        return {"version": self.version, "trained": self.trained, "requested": self.requested,
                "ready": {index: self.ready[index][:5] for index in range(self.trained, self.requested)}}

    def load_state_dict(self, state: dict) -> None:
        self.version, self.trained, self.requested = state["version"], state["trained"], state["requested"]
        self.ready = {index: (*saved, 0.0, 0.0) for index, saved in state["ready"].items()}

    # -- the transport -----------------------------------------------------------------------------------------
    def _start(self) -> None:
        context = torch.multiprocessing.get_context("spawn")
        self.requests, self.results = context.Queue(), context.Queue()
        if self.spec.transport == "collective":
            backend = "nccl" if self.spec.devices else "gloo"
            device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
            self.transport = CollectiveWeights(self.requests, backend, self.spec.timeout, self.spec.startup_timeout,
                                               device)
        else:
            self.transport = QueueWeights(self.requests)
        self.process = context.Process(target=producer_main, name="rollout-producer", daemon=True,
                                       args=(self.requests, self.results, self.spec, self.transport.producer_args()))
        self.started = False
        with visible_devices(self.spec.devices):
            self.process.start()
        self.transport.connect()
        self.prompts = self.upcoming(self.requested)
        self._push_weights()
        self._request_up_to(self.trained + self.ahead)

    def _push_weights(self) -> None:
        start = time.perf_counter()
        self.transport.send(exported_weights(self.actor), self.version)
        self.push_seconds = time.perf_counter() - start

    def _request_up_to(self, last: int) -> None:
        while self.requested <= last:
            prompts, prompt_mask, *meta = next(self.prompts)
            tasks = meta[0].cpu() if meta and meta[0] is not None else None
            self.requests.put(("sample", self.requested, prompts.cpu(), prompt_mask.cpu(), tasks, self.sampling,
                               self.record_entropy))
            self.requested += 1

    def _receive(self, index: int, keep: bool = False) -> tuple:
        """Rollout ``index`` (kept in :attr:`ready` with ``keep``), waiting at most ``--rollout_startup_timeout``
        for the producer to be ready, then ``--rollout_timeout`` for the rollout."""
        deadline = time.monotonic() + (self.timeout if self.started else self.spec.startup_timeout)
        while index not in self.ready:
            try:
                message = self.results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                message = None
            except (OSError, EOFError):  # a rollout whose sender died cannot be unpickled (its tensors went with it)
                message = None
                self.process.join(timeout=POLL_SECONDS)
            if message is None:
                if not self.process.is_alive():
                    code = self.process.exitcode
                    self.process = None
                    raise RunStopped(f"the rollout producer died (exit code {code}) before sending rollout {index}; "
                                     "resume from the last checkpoint with --resume") from None
                if time.monotonic() > deadline:
                    self.process.kill()
                    self.process = None
                    if not self.started:
                        raise RunStopped(f"the rollout producer did not start in {self.spec.startup_timeout:g} s "
                                         "(--rollout_startup_timeout); stopped it")
                    raise RunStopped(f"the rollout producer sent no rollout for {self.timeout:g} s "
                                     f"(--rollout_timeout) while the trainer waited for rollout {index}; stopped it")
                continue
            if message[0] == "ready":
                self.started, deadline = True, time.monotonic() + self.timeout
                continue
            if message[0] == "error":
                self.close()
                raise RunStopped(f"the rollout producer failed: {message[1]}")
            self.ready[message[1]] = (*from_value(message[2]), *message[3:])
        return self.ready[index] if keep else self.ready.pop(index)


@contextlib.contextmanager
def visible_devices(devices: Tuple[int, ...]):
    """``CUDA_VISIBLE_DEVICES`` set to ``devices`` while a producer is started (a spawned process reads it when it
    first touches CUDA), and restored after; nothing changes on CPU (no devices)."""
    if not devices:
        yield
        return
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
    try:
        yield
    finally:
        if saved is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
