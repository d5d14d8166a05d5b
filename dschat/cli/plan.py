"""Memory plan of a stage's config on N GPUs: for each model of the stage (SFT: the policy; RM: the reward model;
DPO: policy + reference; PPO: actor, reference, critic, reward model) its parameters, gradients and optimizer
states under the config's ZeRO stage, offload, dtype and LoRA, the activations of each phase (training micro
batch, scoring, generation, evaluation) at the config's batch sizes and sequence lengths, the peak per GPU,
and whether it fits with :data:`RESERVE_GIB` (3 GiB, ``--reserve_gb``) kept free for the CUDA context and
fragmentation:

    python -m dschat.cli.plan configs/ppo/gemma-7b/tldr.yaml --num_gpus 8 [--gpu_memory_gb 80]

The stage is the ``configs/STAGE/`` folder the file lies in (else ``--stage``), the model its ``MODEL`` folder or
file name (else the config's model path; ``--model`` overrides both). Flags after the plan's own override the
config, as on the stage's command line (``--max_seq_len 2048``). Parameter counts come from the model's config
(Gemma's published dimensions; no download), instantiated on the meta device. Nothing is allocated.

``--table`` prints, for every config under a folder, the peak per GPU at 1, 8 and 16 GPUs and the smallest GPU
count (a power of two up to 64) that fits: the table of ``docs/memory_plan.md``."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from dataclasses import dataclass
import functools
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from dschat.cli import stage_parser
from dschat.stages.configs import STAGE_CONFIGS
from dschat.core.entrypoint import ArgumentParser, explain_usage_error, run_cli
from dschat.stages.resolve import resolve
from dschat.core.launch import local_world_size
from dschat.rlhf.algorithms import get_algorithm
from dschat.core.config import ConfigError
from dschat.model.names import looks_like_hub_id
from dschat.training.memory_plan import (
    DTYPE_BYTES,
    GIB,
    ModelShape,
    SYNC_GROUP_BYTES,
    States,
    checkpoint_bytes,
    decoder_shape,
    forward_activations,
    generation_activations,
    model_states,
    training_activations,
)

GEMMA = dict(model_type="gemma", vocab_size=256000, max_position_embeddings=8192, tie_word_embeddings=True)
KNOWN_MODELS: Dict[str, dict] = {
    "gemma-2b": dict(GEMMA, hidden_size=2048, intermediate_size=16384, num_hidden_layers=18,
                     num_attention_heads=8, num_key_value_heads=1, head_dim=256),
    "gemma-7b": dict(GEMMA, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                     num_attention_heads=16, num_key_value_heads=16, head_dim=256),
    "gemma2-27b": dict(GEMMA, model_type="gemma2", hidden_size=4608, intermediate_size=36864, num_hidden_layers=46,
                       num_attention_heads=32, num_key_value_heads=16, head_dim=128),
}
"""The published ``config.json`` dimensions of the paper's models (google/gemma-2b, gemma-7b, gemma-2-27b);
CodeGemma 1.1 2B / 7B share Gemma 2B / 7B's."""
KNOWN_MODELS.update({"codegemma-2b": KNOWN_MODELS["gemma-2b"], "codegemma-7b": KNOWN_MODELS["gemma-7b"]})
HUB_IDS = {"google/gemma-2b": "gemma-2b", "google/gemma-7b": "gemma-7b", "google/gemma-2-27b": "gemma2-27b",
           "google/codegemma-1.1-2b": "codegemma-2b", "google/codegemma-1.1-7b-it": "codegemma-7b"}
"""The hub ids the configs name -> their entry of :data:`KNOWN_MODELS`."""
TABLE_GPUS = (1, 8, 16)
"""GPU counts of ``--table``'s columns."""
SEARCH_GPUS = (1, 2, 4, 8, 16, 32, 64)
"""GPU counts ``--table`` tries for the smallest that fits."""
RESERVE_GIB = 3.0
"""GiB per GPU the plan leaves free besides its peak: the CUDA context (outside PyTorch's allocator, ~0.5 GiB per
process) and the caching allocator's fragmentation (reserved - allocated: 0.9 GiB in the measured Gemma-2B step-3
run of docs/memory_plan.md), with margin. ``--reserve_gb`` changes it."""


def fits(peak_bytes: float, gpu_memory_gib: float, reserve_gib: float = RESERVE_GIB) -> bool:
    """Whether a plan's peak per GPU plus the reserve fits in ``gpu_memory_gib``."""
    return peak_bytes + reserve_gib * GIB <= gpu_memory_gib * GIB


# ------------------------------------------------------------------------------------------------ model shapes


def model_dims(name: str) -> dict:
    """The ``config.json`` values of model ``name`` (a known name or hub id, an offline name, a local checkpoint
    or a hub id in the local hub cache), read without torch or transformers."""
    from dschat.model.names import ASSET_TOKENIZER, TINY_GEMMA, tiny_gemma_dims
    from dschat.model.smollm2 import SMOLLM2, default_cache_dir

    key = HUB_IDS.get(name, name)
    if key in KNOWN_MODELS:
        return dict(KNOWN_MODELS[key])
    if name == TINY_GEMMA:
        from tokenizers import Tokenizer

        vocab = Tokenizer.from_file(str(ASSET_TOKENIZER / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
        return {"model_type": "gemma", **tiny_gemma_dims(vocab)}
    path = Path(default_cache_dir() if name == SMOLLM2 else name) / "config.json"
    if not path.is_file() and name != SMOLLM2 and looks_like_hub_id(name):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
        path = Path(cached) if isinstance(cached, str) else path
    if not path.is_file():
        how = ("convert it once with `python -m dschat.model.smollm2`" if name == SMOLLM2 else "pass --model")
        raise ConfigError(f"model {name}: no config.json to count it from (not a local checkpoint, not in the hub "
                          f"cache, not one of the known models: {', '.join(sorted(KNOWN_MODELS))}); {how}")
    with open(path) as handle:
        return json.load(handle)


def hf_config(name: str):
    """The transformers config of model ``name`` (:func:`model_dims`; the GPU benchmarks build models from it)."""
    from transformers import AutoConfig

    values = model_dims(name)
    return AutoConfig.for_model(values.pop("model_type"), **values)


@functools.lru_cache(maxsize=None)
def model_shape(name: str, head: str = "lm") -> ModelShape:
    """The :class:`ModelShape` of model ``name`` with a language-model head (``lm``) or a reward/critic ``score``
    head, counted from its config's dimensions (no torch, no weights; ``tests/test_memory_plan.py`` checks the
    count against transformers' models on the meta device)."""
    try:
        return decoder_shape(model_dims(name), head)
    except ValueError as err:
        raise ConfigError(f"model {name}: {err}") from None


# ------------------------------------------------------------------------------------------------ the plan


@dataclass
class Role:
    """One model of a stage: its name, shape and states on one process."""

    role: str
    model: str
    shape: ModelShape
    trainable: int
    zero_stage: int
    states: States
    checkpoint: float
    """Bytes of its checkpoint (0: a frozen model, not checkpointed)."""


@dataclass
class Plan:
    """Everything the report prints for one config on ``world_size`` GPUs."""

    stage: str
    world_size: int
    dtype: str
    roles: List[Role]
    phases: List[Tuple[str, float]]
    """(what runs, activation bytes per process)."""
    host_extra: float = 0.0
    """Host bytes per process beyond the models' offloaded states (a sleeping vLLM engine's weights, a CPU
    producer's model and queue): not offload, what :attr:`host_extra_label` says."""
    host_extra_label: str = ""
    """What :attr:`host_extra` holds, as the report labels it."""
    producer_gpus: int = 0
    """The launch's rollout-producer GPUs (``--rollout_gpus`` on each node; 0: none, sampling on CPU or not apart)."""
    producer: float = 0.0
    """Bytes on each producer GPU: for each producer it holds, the actor's copy, its generation (or vLLM's share of
    the GPU) and one received weight group."""

    @property
    def states(self) -> float:
        """Every model's resident states, and the largest ZeRO-3 gathered layer (one model runs at a time)."""
        return sum(r.states.resident for r in self.roles) + max(r.states.gathered for r in self.roles)

    @property
    def trainer_peak(self) -> float:
        """Bytes per training GPU: every model's states (all resident throughout) + the largest phase's
        activations."""
        return self.states + max(bytes_ for _, bytes_ in self.phases)

    @property
    def peak(self) -> float:
        """Bytes on the fullest GPU, training or producer."""
        return max(self.trainer_peak, self.producer)

    @property
    def gpus(self) -> int:
        """Every GPU of the launch: the training processes' and their producers'."""
        return self.world_size + self.producer_gpus

    @property
    def offloaded(self) -> float:
        """Host bytes per process of the models' states that ZeRO offloads (``--offload``, ``--offload_params``)."""
        return sum(role.states.host for role in self.roles)

    @property
    def host(self) -> float:
        """Host bytes per process: the offloaded states and :attr:`host_extra`."""
        return self.offloaded + self.host_extra

    def host_terms(self) -> str:
        """What the host bytes per process are, term by term (``offloaded states 1.00 GiB + ...``)."""
        terms = [("offloaded states", self.offloaded), (self.host_extra_label, self.host_extra)]
        return " + ".join(f"{label} {gib(bytes_)} GiB" for label, bytes_ in terms if bytes_) or "none"


def _role(role: str, model: str, head: str, args, *, zero_stage: int, trained: bool, lora_dim: int = 0,
          offload_params: bool = False, world_size: int) -> Role:
    shape = model_shape(model, head)
    states = model_states(shape, dtype=args.dtype, zero_stage=zero_stage, world_size=world_size, trained=trained,
                          lora_dim=lora_dim, offload=args.offload and trained,
                          offload_params=offload_params and zero_stage == 3)
    trainable = shape.trainable(lora_dim) if trained else 0
    checkpoint = checkpoint_bytes(shape.params, trainable, DTYPE_BYTES[args.dtype]) if trained else 0
    return Role(role, model, shape, trainable, zero_stage, states, checkpoint)


def supervised_plan(stage: str, args, model: str, world_size: int) -> Plan:
    """SFT, RM or DPO: one trained model (DPO: and its frozen reference) on micro batches of
    ``--per_device_train_batch_size`` examples (pairs for RM and DPO: chosen and rejected rows)."""
    args = resolve(stage, args, world_size)
    head = "score" if stage == "rm" else "lm"
    policy = _role("reward model" if stage == "rm" else "policy", model, head, args, zero_stage=args.zero_stage,
                   trained=True, lora_dim=args.lora_dim, offload_params=args.offload_params, world_size=world_size)
    roles = [policy]
    rows = args.per_device_train_batch_size * (1 if stage == "sft" else 2)
    eval_rows = args.per_device_eval_batch_size * (1 if stage == "sft" else 2)
    phases = [(f"train: {rows} x {args.max_seq_len} tokens", training_activations(
        policy.shape, args.dtype, rows, args.max_seq_len, args.gradient_checkpointing)),
        (f"eval: {eval_rows} x {args.max_seq_len}", forward_activations(policy.shape, args.dtype, eval_rows,
                                                                         args.max_seq_len))]
    if stage == "dpo":
        roles.append(_role("reference", model, "lm", args, zero_stage=args.zero_stage, trained=False,
                           offload_params=args.offload_params, world_size=world_size))
    return Plan(stage, world_size, args.dtype, roles, phases)


def producer_queue_bytes(args) -> float:
    """Host bytes of the rollouts an asynchronous producer holds ahead (``--async_rollout K``): K + 1 rollouts of
    ``generation batch x samples`` rows, each position a token id (8 bytes) and its behaviour log-prob and entropy
    (4 bytes each)."""
    rows = args.per_device_generation_batch_size * args.num_samples_per_prompt
    return (args.async_rollout + 1) * rows * (args.max_prompt_seq_len + args.max_new_tokens) * (8 + 4 + 4)


def ppo_plan(args, world_size: int, gpu_memory_gib: float = 80.0) -> Plan:
    """Step 3: actor and critic trained, reference and reward model frozen (``dschat/rlhf/rlhf_engine.py``).
    Phases: generation of the per-process prompts (KV cache; under ZeRO-3 the actor gathered whole unless
    ``--no_gather_for_generation``), scoring in micro-batch chunks, and the training micro batch, where the actor's
    and the critic's graphs are alive together (both forwards run before the backwards).

    With ``--rollout_engine vllm`` generation is the colocated engine's instead: vLLM takes
    ``--vllm_gpu_memory_utilization`` of the GPU (its copy of the weights, 1/TP of them, and its KV cache) while it
    generates, and its weights plus one gathered group of the actor (ZeRO-3) while they are synced; between
    rollouts it sleeps (level 1: weights to host memory, KV cache freed), so the training phases do not count it
    and the host does. With ``--async_rollout K`` a producer process per training process samples instead
    (``dschat/rlhf/rollout/producer.py``): the training GPUs run no rollout generation. On CPU the host holds the
    producer's copy of the actor, one pushed version in flight and :func:`producer_queue_bytes`; on
    ``--rollout_gpus`` each producer GPU holds, for each producer on it, the copy (the hf engine: with its
    generation; vLLM: ``--vllm_gpu_memory_utilization`` of the GPU) and one received weight group, and the host the
    queue."""
    args = resolve("ppo", args, world_size)
    n = world_size
    actor = _role("actor", args.actor_model_name_or_path, "lm", args, zero_stage=args.actor_zero_stage, trained=True,
                  lora_dim=args.actor_lora_dim, offload_params=args.offload_params, world_size=n)
    roles = [actor, _role("reference", args.actor_model_name_or_path, "lm", args, zero_stage=args.actor_zero_stage,
                          trained=False, offload_params=args.offload_params, world_size=n)]
    critic = None
    if get_algorithm(args.algo).needs_critic:
        critic = _role("critic", args.critic_model_name_or_path, "score", args, zero_stage=args.critic_zero_stage, trained=True,
                       lora_dim=args.critic_lora_dim, offload_params=args.offload_params, world_size=n)
        roles.append(critic)
    if args.reward == "model":
        roles.append(_role("reward model", args.reward_model_name_or_path, "score", args,
                           zero_stage=args.reward_model_zero_stage(), trained=False,
                           offload_params=args.offload_params or args.reward_offload_params, world_size=n))
    prompt, new = args.max_prompt_seq_len, args.max_new_tokens
    seq, micro = prompt + new, args.per_device_train_batch_size
    rollouts = args.per_device_generation_batch_size * args.num_samples_per_prompt
    gathered = 0.0
    if args.actor_zero_stage == 3 and not args.no_gather_for_generation:
        gathered = DTYPE_BYTES[args.dtype] * actor.shape.params * (n - 1) / n
    train = training_activations(actor.shape, args.dtype, micro, seq, args.actor_gradient_checkpointing)
    if critic is not None:
        train += training_activations(critic.shape, args.dtype, micro, seq, args.critic_gradient_checkpointing)
    phases = [
        (f"generate: {rollouts} x ({prompt} + {new}) tokens",
         gathered + generation_activations(actor.shape, args.dtype, rollouts, prompt, new)),
        (f"score: {micro} x {seq}", forward_activations(actor.shape, args.dtype, micro, seq)),
        (f"train: {micro} x {seq}", train),
        (f"eval generate: {args.per_device_eval_batch_size} x ({prompt} + {new})",
         gathered + generation_activations(actor.shape, args.dtype, args.per_device_eval_batch_size, prompt, new)),
    ]
    weights = DTYPE_BYTES[args.dtype] * actor.shape.params
    if args.async_rollout and not args.rollout_gpus:  # a CPU producer: its model and one pushed version on the host
        return Plan("ppo", n, args.dtype, roles, phases[1:], host_extra=2 * weights + producer_queue_bytes(args),
                    host_extra_label="the CPU producer's actor, a pushed version and its rollout queue")
    if args.async_rollout:  # producers on GPUs of their own, each GPU holding those of `sharing` processes
        sharing = local_world_size(n) // len(args.rollout_gpus)
        received = min(SYNC_GROUP_BYTES, weights)
        sampling = (max(args.vllm_gpu_memory_utilization * gpu_memory_gib * GIB, weights)
                    if args.rollout_engine == "vllm"
                    else weights + generation_activations(actor.shape, args.dtype, rollouts, prompt, new))
        return Plan("ppo", n, args.dtype, roles, phases[1:], host_extra=producer_queue_bytes(args),
                    host_extra_label="the producer's rollout queue", producer_gpus=n // sharing,
                    producer=sharing * (sampling + received))
    if args.rollout_engine != "vllm":
        return Plan("ppo", n, args.dtype, roles, phases)
    engine_weights = weights / args.vllm_tensor_parallel_size
    engine = max(args.vllm_gpu_memory_utilization * gpu_memory_gib * GIB, engine_weights)  # its weights at least
    group = min(SYNC_GROUP_BYTES, weights) if args.actor_zero_stage == 3 else 0
    phases = [(f"vLLM generate ({args.vllm_gpu_memory_utilization:g} of the GPU: weights + KV cache)", engine),
              ("vLLM weight sync (its weights + one gathered group)", engine_weights + group), *phases[1:3]]
    return Plan("ppo", n, args.dtype, roles, phases, host_extra=engine_weights,
                host_extra_label="vLLM's sleeping weights")


# ------------------------------------------------------------------------------------------------ configs


def config_stage(path: str) -> Optional[str]:
    """The stage of a config file: the nearest enclosing folder named after one (``configs/ppo/...``)."""
    for parent in Path(path).resolve().parents:
        if parent.name in STAGE_CONFIGS:
            return parent.name
    return None


def config_model(path: str) -> Optional[str]:
    """The model a config is for: its ``configs/STAGE/MODEL.yaml`` name or ``configs/STAGE/MODEL/`` folder."""
    file = Path(path)
    for candidate in (file.stem, file.parent.name):
        if candidate in KNOWN_MODELS:
            return candidate
    return None


def resolve_config(path: Optional[str], stage: Optional[str], overrides: List[str]):
    """``(stage, parsed config)`` of ``path`` (None: flags only, with ``stage``) with the stage's command-line
    ``overrides``."""
    if path is not None and not os.path.isfile(path):
        raise ConfigError(f"{path}: no such config file")
    stage = stage or (config_stage(path) if path else None)
    if stage is None:
        raise ConfigError(f"{path}: not under a configs/STAGE/ folder ({', '.join(STAGE_CONFIGS)}); pass --stage")
    config = [] if path is None else ["--config", path]
    return stage, stage_parser(stage).parse_config([*config, "--output_dir", "<plan>", *overrides])


def make_plan(path: Optional[str], world_size: int, stage: Optional[str] = None, model: Optional[str] = None,
              overrides: Tuple[str, ...] = (), gpu_memory_gib: float = 80.0) -> Plan:
    """The :class:`Plan` of config ``path`` (None: the stage's defaults) and command-line ``overrides`` on
    ``world_size`` GPUs."""
    if world_size < 1:
        raise ConfigError(f"--num_gpus {world_size}: expected a positive number of GPUs")
    stage, args = resolve_config(path, stage, list(overrides))
    return plan_for_args(stage, args, world_size, model or (config_model(path) if path else None), gpu_memory_gib)


def plan_for_args(stage: str, args, world_size: int, model: Optional[str] = None, gpu_memory_gib: float = 80.0
                  ) -> Plan:
    """The :class:`Plan` of a parsed ``stage`` config on ``world_size`` GPUs (``model``: every role's model, else
    the config's model flags; ``gpu_memory_gib``: the GPU a vLLM rollout engine takes its share of)."""
    if stage != "ppo":
        return supervised_plan(stage, args, model or args.model_name_or_path, world_size)
    actor = model or args.actor_model_name_or_path
    critic = model or args.critic_model_name_or_path or args.reward_model_name_or_path or actor
    models = dict(actor_model_name_or_path=actor, critic_model_name_or_path=critic,
                  reward_model_name_or_path=model or args.reward_model_name_or_path or critic)
    return ppo_plan(dataclasses.replace(args, **models), world_size, gpu_memory_gib)


# ------------------------------------------------------------------------------------------------ report


def gib(bytes_: float) -> str:
    return f"{bytes_ / GIB:.2f}"


DEFAULT_HOST_GIB = 1024.0
"""Host memory per node (GiB) the plan judges the host bytes against unless ``--host_memory_gb`` says otherwise:
the *target* node's, not the machine the plan runs on (a laptop plans a cluster's run); 1 TiB, a usual size for an
8 x 80 GB GPU node. The pre-flight, which runs on the training node itself, judges that machine's memory."""


@dataclass(frozen=True)
class Host:
    """The host memory a plan is judged against: GiB per node, GPUs per node, and where the figure comes from."""

    memory_gib: float = DEFAULT_HOST_GIB
    gpus_per_node: int = 8
    source: str = f"--host_memory_gb's default {DEFAULT_HOST_GIB:g}: a target node's, not this machine's"

    def per_node(self, plan: Plan) -> float:
        """Bytes of host memory a node needs: each of its GPUs' processes holds its host bytes."""
        return plan.host * min(plan.world_size, self.gpus_per_node)

    def fits(self, plan: Plan) -> bool:
        return self.per_node(plan) <= self.memory_gib * GIB

    def line(self, plan: Plan) -> str:
        gpus = min(plan.world_size, self.gpus_per_node)
        return (f"host per node ({gpus} GPU process(es)): {gib(self.per_node(plan))} GiB: "
                f"{'within' if self.fits(plan) else 'EXCEEDS'} {self.memory_gib:.1f} GiB ({self.source})")


def judge(plan: Plan, gpu_memory_gib: float, reserve_gib: float, host: Host) -> str:
    """The one verdict of a plan, in every mode (a config, ``--table``, the pre-flight): ``fits``, or ``does NOT
    fit`` and what is short (GPU memory with the reserve, host memory per node)."""
    short = [what for what, ok in (("GPU memory", fits(plan.peak, gpu_memory_gib, reserve_gib)),
                                   ("host memory", host.fits(plan))) if not ok]
    return "fits" if not short else f"does NOT fit ({' and '.join(short)})"


def report(plan: Plan, gpu_memory_gib: float, reserve_gib: float = RESERVE_GIB, host: Host = Host()) -> str:
    """The plan as text: one row per model (``offload``: its states ZeRO keeps in host memory), one per phase, the
    peak per GPU and over all GPUs, the host bytes term by term and per node, and the verdict."""
    lines = [f"{plan.stage} on {plan.world_size} GPU(s), {plan.dtype}; GiB per GPU",
             f"{'model':<13} {'checkpoint':<22} {'params':>8} {'trained':>8} {'ZeRO':>4} {'params':>8} "
             f"{'grads':>8} {'optim':>8} {'offload':>8}"]
    for role in plan.roles:
        states = role.states
        lines.append(f"{role.role:<13} {role.model[-22:]:<22} {role.shape.params / 1e9:>7.3f}B "
                     f"{role.trainable / 1e9:>7.3f}B {role.zero_stage:>4} {gib(states.params):>8} "
                     f"{gib(states.gradients):>8} {gib(states.optimizer):>8} {gib(states.host):>8}")
    gathered = max(role.states.gathered for role in plan.roles)
    if gathered:
        lines.append(f"{'ZeRO-3 gathered layer (the largest; one model runs at a time)':<60} {gib(gathered):>8}")
    lines.append(f"{'model states':<60} {gib(plan.states):>8}")
    for name, bytes_ in plan.phases:
        lines.append(f"activations, {name:<47} {gib(bytes_):>8}")
    if plan.producer_gpus:
        sharing = plan.world_size // plan.producer_gpus
        lines.append(f"{f'rollout producer GPU ({sharing} producer(s) each, + one weight group)':<60} "
                     f"{gib(plan.producer):>8}")
    gpu_ok = fits(plan.peak, gpu_memory_gib, reserve_gib)
    lines += [f"peak per GPU {gib(plan.peak)} GiB + {reserve_gib:g} GiB reserve: {'within' if gpu_ok else 'EXCEEDS'} "
              f"{gpu_memory_gib:g} GiB; all {plan.gpus} GPU(s): "
              f"{gib(plan.trainer_peak * plan.world_size + plan.producer * plan.producer_gpus)} GiB",
              f"host per GPU process: {plan.host_terms()}", host.line(plan),
              f"verdict on {plan.world_size} GPU(s): {judge(plan, gpu_memory_gib, reserve_gib, host)}"]
    return "\n".join(lines)


def detected_host_gib() -> float:
    """This machine's physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def search(path: Optional[str], gpu_memory_gib: float, *, stage: Optional[str] = None, model: Optional[str] = None,
           overrides: Tuple[str, ...] = (), reserve_gib: float = RESERVE_GIB, host: Host = Host()
           ) -> Tuple[Optional[int], List[str]]:
    """``(the smallest of SEARCH_GPUS on which the config fits, one line per count tried)`` by :func:`judge`; a
    count the config cannot run on (its global batch, the vLLM engines' tensor parallelism) is tried, said so,
    and skipped."""
    lines = []
    for n in SEARCH_GPUS:
        try:
            made = make_plan(path, n, stage, model, overrides, gpu_memory_gib)
        except ConfigError as err:
            lines.append(f"{n:>3} GPUs: {err}")
            continue
        verdict = judge(made, gpu_memory_gib, reserve_gib, host)
        lines.append(f"{n:>3} GPUs: peak {gib(made.peak)} GiB per GPU, host {gib(host.per_node(made))} GiB per "
                     f"node: {verdict}")
        if verdict == "fits":
            return n, lines
    return None, lines


def smallest_fit(path: str, gpu_memory_gib: float, reserve_gib: float = RESERVE_GIB, host: Host = Host()
                 ) -> Optional[int]:
    """The smallest of :data:`SEARCH_GPUS` on which ``path`` fits (None: none does)."""
    return search(path, gpu_memory_gib, reserve_gib=reserve_gib, host=host)[0]


def search_answer(found: Optional[int]) -> str:
    return f"the smallest GPU count that fits: {found}" if found else f"no GPU count up to {SEARCH_GPUS[-1]} fits"


def search_report(found: Optional[int], lines: List[str], gpu_memory_gib: float) -> str:
    return "\n".join([f"{search_answer(found)} ({gpu_memory_gib:g} GiB GPUs; the counts tried):", *lines])


def table(folder: str, gpu_memory_gib: float, reserve_gib: float = RESERVE_GIB, host: Host = Host()) -> str:
    """Markdown table over the launchers' configs under ``folder`` (``STAGE/MODEL/TASK.yaml``; the base and
    model layers are not run alone): peak GiB per GPU at :data:`TABLE_GPUS` and the smallest GPU count that
    fits (:func:`judge`: GPU memory with the reserve and host memory per node, as a single config's plan)."""
    head = " | ".join(f"{n} GPU{'s' * (n > 1)}" for n in TABLE_GPUS)
    rows = [f"| config | {head} | smallest fit |", "|---" * (len(TABLE_GPUS) + 2) + "|"]
    for path in sorted(str(p) for p in Path(folder).rglob("*.yaml")):
        if Path(path).parent.name not in KNOWN_MODELS:
            continue
        cells = []
        for n in TABLE_GPUS:
            try:
                cells.append(gib(make_plan(path, n, gpu_memory_gib=gpu_memory_gib).peak))
            except ConfigError:
                cells.append("n/a")
        smallest = smallest_fit(path, gpu_memory_gib, reserve_gib, host)
        rows.append(f"| {os.path.relpath(path, Path(folder).parent)} | {' | '.join(cells)} | "
                    f"{smallest or NO_FIT} |")
    return "\n".join(rows)


NO_FIT = f"> {SEARCH_GPUS[-1]}"
"""``--table``'s smallest-fit cell of a config that fits on no GPU count tried."""


def positive(cast):
    def convert(text: str):
        value = cast(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text}: expected a positive number")
        return value
    return convert


class _Parser(ArgumentParser):
    def error(self, message: str):
        raise ConfigError(explain_usage_error(message, self).replace("argument ", "", 1))


def main(argv=None) -> None:
    """Print the plan (or ``--table``); exit status 0 when it fits (every config of the table fits on some GPU
    count), 1 when it does not, 2 on bad input (``run_cli``)."""
    parser = _Parser(description=__doc__)
    parser.add_argument("config", help="stage YAML config, or a launcher script (scripts/step*/*.sh: its config; "
                        "with --table: a folder of configs, e.g. configs)")
    parser.add_argument("--num_gpus", type=positive(int), default=None, help="GPUs (processes) of the run")
    parser.add_argument("--gpu_memory_gb", type=positive(float), default=80.0, help="GiB per GPU (default: 80)")
    parser.add_argument("--reserve_gb", type=float, default=RESERVE_GIB,
                        help=f"GiB per GPU kept free for the CUDA context and fragmentation (default: {RESERVE_GIB:g})")
    parser.add_argument("--stage", choices=sorted(STAGE_CONFIGS), help="default: the configs/STAGE/ folder")
    parser.add_argument("--model", help="model of every role: a known name "
                        f"({', '.join(sorted(KNOWN_MODELS))}), an offline name or a checkpoint (default: from the "
                        "config's folder, else its model path)")
    parser.add_argument("--host_memory_gb", type=positive(float), default=DEFAULT_HOST_GIB,
                        help="GiB of host memory per node of the TARGET machine (offloaded states, vLLM's sleeping "
                        f"weights; default: {DEFAULT_HOST_GIB:g}, not this machine's)")
    parser.add_argument("--gpus_per_node", type=positive(int), default=8, help="GPUs per node (default: 8)")
    parser.add_argument("--table", action="store_true", help="markdown table over every config under CONFIG")
    args, overrides = parser.parse_known_args(argv)
    given = any(token.split("=")[0] == "--host_memory_gb" for token in (sys.argv[1:] if argv is None else argv))
    host = Host(args.host_memory_gb, args.gpus_per_node, "stated: --host_memory_gb" if given else Host.source)
    if args.table:
        if not os.path.isdir(args.config):
            raise ConfigError(f"{args.config}: --table expects a folder of configs")
        text = table(args.config, args.gpu_memory_gb, args.reserve_gb, host)
        print(text)
        sys.exit(1 if f"| {NO_FIT} |" in text else 0)
    if args.num_gpus is None:
        raise ConfigError("--num_gpus: required (the GPUs of the run)")
    config = launcher_config(args.config) if args.config.endswith(".sh") else args.config
    options = dict(stage=args.stage, model=args.model, overrides=tuple(overrides))

    def smallest() -> Tuple[Optional[int], str]:
        found, lines = search(config, args.gpu_memory_gb, reserve_gib=args.reserve_gb, host=host, **options)
        return found, search_report(found, lines, args.gpu_memory_gb)

    try:
        plan = make_plan(config, args.num_gpus, args.stage, args.model, tuple(overrides), args.gpu_memory_gb)
    except ConfigError as err:
        if not os.path.isfile(config):
            raise
        found, text = smallest()
        print(text)
        raise ConfigError(f"{err}; {search_answer(found)} (the counts tried are listed above)") from None
    print(report(plan, args.gpu_memory_gb, args.reserve_gb, host))
    if judge(plan, args.gpu_memory_gb, args.reserve_gb, host) != "fits":
        print(smallest()[1])
        sys.exit(1)


def launcher_config(script: str) -> str:
    """The config a launcher script runs (``scripts/step*/*.sh``: ``launch.sh STAGE MODEL TASK``); its method
    flags (``ppo``: ``--ngram 1``) change no memory."""
    if not os.path.isfile(script):
        raise ConfigError(f"{script}: no such launcher script")
    with open(script) as handle:
        match = re.search(r"launch\.sh\"?\s+(\w+)\s+(\S+)\s+(\S+)", handle.read())
    if match is None:
        raise ConfigError(f"{script}: not a launcher (no `launch.sh STAGE MODEL TASK` line)")
    stage, model, task = match.groups()
    root = Path(script).resolve().parents[2]
    return str(root / "configs" / ("ppo" if stage == "mappo" else stage) / model / f"{task}.yaml")


if __name__ == "__main__":
    run_cli(main)
