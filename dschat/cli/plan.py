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
from dataclasses import dataclass
import functools
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from dschat.cli import stage_parser
from dschat.stages.configs import STAGE_CONFIGS
from dschat.utils.cli import ArgumentParser, explain_usage_error, run_cli
from dschat.stages.resolve import resolve, reward_zero_stage
from dschat.rlhf.algorithms import get_algorithm
from dschat.utils.config import ConfigError
from dschat.utils.memory_plan import (
    DTYPE_BYTES,
    GIB,
    ModelShape,
    States,
    checkpoint_bytes,
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


def hf_config(name: str):
    """The transformers config of model ``name`` (a known name or hub id, an offline name, a local checkpoint)."""
    from transformers import AutoConfig

    from dschat.utils.model.loading import resolve_model_path
    from dschat.utils.model.smollm2 import SMOLLM2
    from dschat.utils.model.names import TINY_GEMMA
    from dschat.utils.model.tiny import tiny_gemma_config

    key = HUB_IDS.get(name, name)
    if key in KNOWN_MODELS:
        values = dict(KNOWN_MODELS[key])
        return AutoConfig.for_model(values.pop("model_type"), **values)
    if name == TINY_GEMMA:
        from dschat.utils.model import load_tokenizer

        return tiny_gemma_config(load_tokenizer(TINY_GEMMA))
    path = resolve_model_path(name)
    if not os.path.isdir(path):
        raise ConfigError(f"model {name}: not a local checkpoint, an offline name ({TINY_GEMMA}, {SMOLLM2}) or one "
                          f"of the known models ({', '.join(sorted(KNOWN_MODELS))}); pass --model")
    return AutoConfig.from_pretrained(path)


@functools.lru_cache(maxsize=None)
def model_shape(name: str, head: str = "lm") -> ModelShape:
    """The :class:`ModelShape` of model ``name`` with a language-model head (``lm``) or a reward/critic ``score``
    head, counted on a meta-device instance of its config (no weights)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    config = hf_config(name)
    if head == "score":
        config.num_labels = 1
    with torch.device("meta"):
        model = (AutoModelForCausalLM if head == "lm" else AutoModelForSequenceClassification).from_config(config)
    largest = max(sum(p.numel() for p in module.parameters(recurse=False)) for module in model.modules())
    output = "lm_head" if head == "lm" else "score"
    lora = sum(m.in_features + m.out_features for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and not n.endswith(output))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return ModelShape(
        params=sum(p.numel() for p in model.parameters()), largest_layer=largest, lora_features=lora,
        head_params=0 if head == "lm" else sum(p.numel() for p in model.score.parameters()),
        hidden=config.hidden_size, intermediate=config.intermediate_size, layers=config.num_hidden_layers,
        q_dim=config.num_attention_heads * head_dim, kv_dim=config.num_key_value_heads * head_dim,
        head_dim=head_dim, vocab=config.vocab_size if head == "lm" else 1)


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
    """Host bytes per process beyond the models' offloaded states (a sleeping vLLM engine's weights)."""

    @property
    def states(self) -> float:
        """Every model's resident states, and the largest ZeRO-3 gathered layer (one model runs at a time)."""
        return sum(r.states.resident for r in self.roles) + max(r.states.gathered for r in self.roles)

    @property
    def peak(self) -> float:
        """Bytes per GPU: every model's states (all resident throughout) + the largest phase's activations."""
        return self.states + max(bytes_ for _, bytes_ in self.phases)

    @property
    def host(self) -> float:
        return sum(role.states.host for role in self.roles) + self.host_extra


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


def ppo_plan(args, world_size: int, gpu_memory_gib: float = 80.0) -> Plan:
    """Step 3: actor and critic trained, reference and reward model frozen (``dschat/rlhf/rlhf_engine.py``).
    Phases: generation of the per-process prompts (KV cache; under ZeRO-3 the actor gathered whole unless
    ``--no_gather_for_generation``), scoring in micro-batch chunks, and the training micro batch, where the actor's
    and the critic's graphs are alive together (both forwards run before the backwards).

    With ``--rollout_engine vllm`` generation is the colocated engine's instead: vLLM takes
    ``--vllm_gpu_memory_utilization`` of the GPU (its copy of the weights, 1/TP of them, and its KV cache) while it
    generates, and its weights plus one gathered group of the actor (ZeRO-3) while they are synced; between
    rollouts it sleeps (level 1: weights to host memory, KV cache freed), so the training phases do not count it
    and the host does."""
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
        roles.append(_role("reward model", args.reward_model_name_or_path, "score", args, zero_stage=reward_zero_stage(args),
                           trained=False, offload_params=args.offload_params or args.reward_offload_params,
                           world_size=n))
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
    if args.rollout_engine != "vllm":
        return Plan("ppo", n, args.dtype, roles, phases)
    from dschat.rlhf.rollout.weights import SYNC_GROUP_BYTES

    engine_weights = DTYPE_BYTES[args.dtype] * actor.shape.params / args.vllm_tensor_parallel_size
    engine = max(args.vllm_gpu_memory_utilization * gpu_memory_gib * GIB, engine_weights)  # its weights at least
    group = min(SYNC_GROUP_BYTES, DTYPE_BYTES[args.dtype] * actor.shape.params) if args.actor_zero_stage == 3 else 0
    phases = [(f"vLLM generate ({args.vllm_gpu_memory_utilization:g} of the GPU: weights + KV cache)", engine),
              ("vLLM weight sync (its weights + one gathered group)", engine_weights + group), *phases[1:3]]
    return Plan("ppo", n, args.dtype, roles, phases, host_extra=engine_weights)


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


def report(plan: Plan, gpu_memory_gib: float, reserve_gib: float = RESERVE_GIB) -> str:
    """The plan as text: one row per model, one per phase, the peak per GPU and over all GPUs, and the verdict."""
    lines = [f"{plan.stage} on {plan.world_size} GPU(s), {plan.dtype}; GiB per GPU",
             f"{'model':<13} {'checkpoint':<22} {'params':>8} {'trained':>8} {'ZeRO':>4} {'params':>8} "
             f"{'grads':>8} {'optim':>8} {'host':>8}"]
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
    lines.append(f"peak per GPU {gib(plan.peak)} GiB + {reserve_gib:g} GiB reserve of {gpu_memory_gib:g} GiB: "
                 f"{verdict(plan, gpu_memory_gib, reserve_gib)}; all {plan.world_size} GPU(s): "
                 f"{gib(plan.peak * plan.world_size)} GiB; host (offload) per GPU: {gib(plan.host)} GiB")
    return "\n".join(lines)


def verdict(plan: Plan, gpu_memory_gib: float, reserve_gib: float = RESERVE_GIB) -> str:
    return "fits" if fits(plan.peak, gpu_memory_gib, reserve_gib) else "does NOT fit"


def smallest_fit(path: str, gpu_memory_gib: float) -> Optional[int]:
    """The smallest of :data:`SEARCH_GPUS` on which ``path`` fits (None: none does); counts the config's global
    batch cannot be split over are skipped."""
    for n in SEARCH_GPUS:
        try:
            if fits(make_plan(path, n, gpu_memory_gib=gpu_memory_gib).peak, gpu_memory_gib):
                return n
        except ConfigError:
            continue
    return None


def table(folder: str, gpu_memory_gib: float) -> str:
    """Markdown table over the launchers' configs under ``folder`` (``STAGE/MODEL/TASK.yaml``; the base and
    model layers are not run alone): peak GiB per GPU at :data:`TABLE_GPUS` and the smallest GPU count that
    fits."""
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
        smallest = smallest_fit(path, gpu_memory_gib)
        rows.append(f"| {os.path.relpath(path, Path(folder).parent)} | {' | '.join(cells)} | "
                    f"{smallest or f'> {SEARCH_GPUS[-1]}'} |")
    return "\n".join(rows)


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
    parser = _Parser(description=__doc__)
    parser.add_argument("config", help="stage YAML config (with --table: a folder of them, e.g. configs)")
    parser.add_argument("--num_gpus", type=positive(int), default=None, help="GPUs (processes) of the run")
    parser.add_argument("--gpu_memory_gb", type=positive(float), default=80.0, help="GiB per GPU (default: 80)")
    parser.add_argument("--reserve_gb", type=float, default=RESERVE_GIB,
                        help=f"GiB per GPU kept free for the CUDA context and fragmentation (default: {RESERVE_GIB:g})")
    parser.add_argument("--stage", choices=sorted(STAGE_CONFIGS), help="default: the configs/STAGE/ folder")
    parser.add_argument("--model", help="model of every role: a known name "
                        f"({', '.join(sorted(KNOWN_MODELS))}), an offline name or a checkpoint (default: from the "
                        "config's folder, else its model path)")
    parser.add_argument("--table", action="store_true", help="markdown table over every config under CONFIG")
    args, overrides = parser.parse_known_args(argv)
    if args.table:
        if not os.path.isdir(args.config):
            raise ConfigError(f"{args.config}: --table expects a folder of configs")
        print(table(args.config, args.gpu_memory_gb))
        return
    if args.num_gpus is None:
        raise ConfigError("--num_gpus: required (the GPUs of the run)")
    plan = make_plan(args.config, args.num_gpus, args.stage, args.model, tuple(overrides), args.gpu_memory_gb)
    print(report(plan, args.gpu_memory_gb, args.reserve_gb))


if __name__ == "__main__":
    run_cli(main)
