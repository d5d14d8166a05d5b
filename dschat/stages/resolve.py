"""Every stage's cross-flag rules, in one place and without torch: the rules a flag's type or a config's
``__post_init__`` cannot state alone because they relate several flags, or a flag to the number of processes.

A rule is a function ``rule(args, world_size) -> args``: it returns a copy of the parsed flags with what it
derives filled in, or raises :class:`~dschat.core.config.ConfigError` (one line naming the flags). :data:`RULES`
lists each stage's rules in the order they apply; :func:`resolve` applies them. The run (``dschat.stages``), the
pre-flight (``--dry_run``, :mod:`dschat.cli.preflight`) and the memory plan (:mod:`dschat.cli.plan`) all call
:func:`resolve`, so the pre-flight refuses exactly what the run would, in the same words, before torch is imported
or anything is created. A new rule is one function added to its stage's tuple. Each rule is idempotent: resolving
resolved flags changes nothing."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Tuple

from dschat.data.registry import answer_task_of, verified_datasets
from dschat.rlhf.algorithms import get_algorithm
from dschat.rlhf.macro_action.choices import DEFAULT_LOSS_AGG
from dschat.stages.configs import RLHFConfig, SupervisedArgs
from dschat.core.config import ConfigError, announce_replaced, split_global_batch, user_set
from dschat.core.launch import local_world_size

Rule = Callable[[Any, int], Any]


# ---------------------------------------------------------------------------------------------- steps 1-2


def resolve_supervised_batches(args: SupervisedArgs, world_size: int) -> SupervisedArgs:
    """A copy of ``args`` whose micro batch and accumulation make ``--global_batch_size`` on ``world_size``
    processes (the largest micro batch <= ``--per_device_train_batch_size``), so one config serves any number of
    GPUs; without a global batch the accumulation defaults to 1."""
    micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    if args.global_batch_size is not None:
        derived = split_global_batch(args.global_batch_size, world_size, micro)
        if accumulation is not None and micro * accumulation * world_size != args.global_batch_size:
            raise ConfigError(f"--global_batch_size {args.global_batch_size} != --per_device_train_batch_size "
                              f"{micro} x --gradient_accumulation_steps {accumulation} x {world_size} processes; "
                              "drop --gradient_accumulation_steps to derive it")
        micro, accumulation = derived if accumulation is None else (micro, accumulation)
    resolved = dataclasses.replace(args, per_device_train_batch_size=micro, gradient_accumulation_steps=accumulation or 1)
    announce_replaced(args, resolved, f"--global_batch_size {args.global_batch_size} on {world_size} processes "
                                      "(set --global_batch_size none to use the flags)")
    return resolved


# ---------------------------------------------------------------------------------------------- every stage's engines


def zero_roles(args: Any) -> Tuple[Tuple[str, int, int], ...]:
    """``((flag prefix, ZeRO stage, LoRA rank), ...)`` of the models a run trains: steps 1-2's one model
    (``--zero_stage``, ``--lora_dim``), step 3's actor and, when ``--algo`` has one, its critic."""
    if isinstance(args, SupervisedArgs):
        return (("", args.zero_stage, args.lora_dim),)
    roles = (("actor_", args.actor_zero_stage, args.actor_lora_dim),)
    if get_algorithm(args.algo).needs_critic:
        roles += (("critic_", args.critic_zero_stage, args.critic_lora_dim),)
    return roles


def resolve_zero(args: Any, world_size: int = 1) -> Any:
    """``args`` unchanged once each trained model's ZeRO stage allows its LoRA and offload flags: LoRA adapters
    on ZeRO-3's partitioned weights are not built here (DeepSpeed-Chat uses LoRA with stages 0-2), and
    ``--offload_params`` moves ZeRO-3's partitioned parameters to the CPU, so it needs stage 3 (DeepSpeed's
    ``offload_param``). (``world_size``: unused; every rule takes it.)"""
    for prefix, stage, lora_dim in zero_roles(args):
        if lora_dim and stage == 3:
            raise ConfigError(f"--{prefix}lora_dim with --{prefix}zero_stage 3 is not supported; use ZeRO stage 0-2 "
                              "with LoRA")
        if args.offload_params and stage != 3:
            raise ConfigError(f"--offload_params needs --{prefix}zero_stage 3 (it is {stage})")
    return args


# ---------------------------------------------------------------------------------------------- step 3


def resolve_algorithm(args: RLHFConfig, world_size: int = 1) -> RLHFConfig:
    """A copy of ``args`` with ``--algo``'s K filled in and its flags checked. A critic-free algorithm's advantage
    is the sequence's (n → ∞, §3.2.3) whatever the termination rule, which then only cuts the units of the ratio,
    the clip, the correction and the loss (docs/objective.md); so its default rule is one macro per response:
    ``--termination fixed --ngram 1`` unless ``--ngram`` is set (on the command line or in a ``--config`` file:
    :func:`user_set`) becomes ``--ngram inf`` (with the default token ratio and token correction, ``--ngram 1``
    and ``inf`` train alike). (``world_size``: unused; every rule takes it.)"""
    algorithm = get_algorithm(args.algo)
    samples = args.num_samples_per_prompt or algorithm.default_samples_per_prompt
    if samples < algorithm.min_samples_per_prompt:
        raise ConfigError(f"--num_samples_per_prompt {samples}: --algo {args.algo} needs at least "
                          f"{algorithm.min_samples_per_prompt}")
    if args.reinforce_baseline != "none" and args.algo != "reinforce":
        raise ConfigError(f"--reinforce_baseline {args.reinforce_baseline} applies to --algo reinforce only")
    ngram = args.ngram
    if not algorithm.needs_critic and args.termination in ("fixed", "ngram") and ngram == 1 \
            and not user_set(args, "ngram"):
        ngram = None  # the advantage is the sequence's (n → ∞, §3.2.3); the rule only cuts the loss's units
    return dataclasses.replace(args, num_samples_per_prompt=samples, ngram=ngram)


def resolve_objective(args: RLHFConfig, world_size: int = 1) -> RLHFConfig:
    """A copy of ``args`` with the objective's defaults filled in (``--clip_eps_high`` = ``--clip_eps``,
    ``--loss_agg`` the mean over ``--ratio``'s units, ``--scale_rewards`` ``--algo``'s own) and the GRPO family's
    knobs refused where they have no meaning: with a critic (PPO's advantage has no group of returns to scale or
    filter), without groups, or beside the asynchronous producer (it samples ahead; resampling would not).
    (``world_size``: unused; every rule takes it.)"""
    algorithm = get_algorithm(args.algo)
    if algorithm.needs_critic:
        for flag, value in (("scale_rewards", args.scale_rewards != "auto"), ("filter_groups", args.filter_groups)):
            if value:
                raise ConfigError(f"--{flag}: a critic-free --algo's knob (group baselines); --algo {args.algo} "
                                  "estimates advantages with a critic (--whiten_advantages scales them)")
    if args.filter_groups and args.num_samples_per_prompt < 2:
        raise ConfigError(f"--filter_groups needs groups: --num_samples_per_prompt {args.num_samples_per_prompt} "
                          "must be >= 2")
    if args.filter_groups and args.async_rollout:
        raise ConfigError("--filter_groups samples again within an iteration; the asynchronous producer "
                          "(--async_rollout) samples ahead: use one of them")
    if args.overlong_buffer_len >= args.max_new_tokens:
        raise ConfigError(f"--overlong_buffer_len {args.overlong_buffer_len} must be below --max_new_tokens "
                          f"{args.max_new_tokens}")
    if args.rollout_is == "none":
        for flag, value in (("rollout_is_mode", args.rollout_is_mode != "truncate"),
                            ("rollout_is_low", args.rollout_is_low), ("rollout_is_agg", args.rollout_is_agg != "product")):
            if value:
                raise ConfigError(f"--{flag}: a setting of the rollout correction; it needs --rollout_is token | "
                                  "macro | sequence")
    if args.rollout_is_low >= args.rollout_is_cap:
        raise ConfigError(f"--rollout_is_low {args.rollout_is_low:g} must be below --rollout_is_cap "
                          f"{args.rollout_is_cap:g}")
    scale = algorithm.scale_rewards if args.scale_rewards == "auto" else args.scale_rewards
    return dataclasses.replace(args, clip_eps_high=args.clip_eps_high or args.clip_eps,
                               loss_agg=args.loss_agg or DEFAULT_LOSS_AGG[args.ratio],
                               scale_rewards=scale if not algorithm.needs_critic else "auto")


def resolve_environment(args: RLHFConfig, world_size: int = 1) -> RLHFConfig:
    """A copy of ``args`` whose ``--reward`` is ``env`` with ``--env`` (the environment scores its episodes), once the
    episodes' flags fit: they are played once, by either engine, here or by the asynchronous producer.
    (``world_size``: unused.)"""
    if args.env is None:
        if args.reward == "env":
            raise ConfigError("--reward env: the score of an --env environment; give --env NAME")
        return args
    if args.reward in ("code", "verifier"):
        raise ConfigError(f"--env {args.env} scores its episodes itself; drop --reward {args.reward}")
    if args.partial_rollout:
        raise ConfigError("--partial_rollout: an --env episode is played whole by one policy version (chunked "
                          "sampling of episodes is not built)")
    if args.filter_groups:
        raise ConfigError("--filter_groups: --env episodes are played once (resampled groups of episodes are not "
                          "built)")
    return dataclasses.replace(args, reward="env")


def resolve_models(args: RLHFConfig, world_size: int = 1) -> RLHFConfig:
    """A copy of ``args`` with the reward model and critic paths filled in from each other (and the actor).
    (``world_size``: unused; every rule takes it.)"""
    if args.reward == "verifier" and answer_task_of(args.data_name) is None:
        raise ConfigError(f"--reward verifier needs a dataset with a verifiable final answer (--data_name "
                          f"{', '.join(verified_datasets())}); {args.data_name} has none")
    if args.reward == "model" and not (args.reward_model_name_or_path or args.critic_model_name_or_path):
        raise ConfigError("--reward model needs --reward_model_name_or_path (or --critic_model_name_or_path)")
    reward_stage = args.reward_model_zero_stage()
    if args.reward_offload_params and reward_stage != 3:
        raise ConfigError(f"--reward_offload_params needs the reward model under ZeRO-3 (its stage is {reward_stage}; "
                          "add --reward_zero_stage 3)")
    reward = args.reward_model_name_or_path or args.critic_model_name_or_path
    critic = args.critic_model_name_or_path or (reward if args.reward == "model" else args.actor_model_name_or_path)
    return dataclasses.replace(args, reward_model_name_or_path=reward, critic_model_name_or_path=critic)


def resolve_engine(args: RLHFConfig, world_size: int) -> RLHFConfig:
    """``args`` unchanged once the engine's devices fit the launch: a colocated vLLM engine's
    ``--vllm_tensor_parallel_size`` processes divide it; an asynchronous producer's ``--rollout_gpus`` divide the
    node's processes (each GPU holding the producers of as many processes), reached by a transport that can carry
    GPU tensors; ``--partial_rollout_chunk`` with ``--partial_rollout``, which needs a producer."""
    if args.partial_rollout_chunk != type(args).partial_rollout_chunk and not args.partial_rollout:
        raise ConfigError(f"--partial_rollout_chunk {args.partial_rollout_chunk}: needs --partial_rollout")
    if not args.async_rollout:
        for flag, value in (("rollout_gpus", args.rollout_gpus), ("rollout_transport", args.rollout_transport != "auto"),
                            ("partial_rollout", args.partial_rollout)):
            if value:
                raise ConfigError(f"--{flag}: the asynchronous producer's setting; it needs --async_rollout >= 1")
        if args.rollout_engine == "vllm" and world_size % args.vllm_tensor_parallel_size:
            raise ConfigError(f"--vllm_tensor_parallel_size {args.vllm_tensor_parallel_size} must divide the "
                              f"{world_size} processes (each engine spans that many of them)")
        return args
    gpus = args.rollout_gpus
    if not gpus:
        if args.rollout_engine == "vllm" and args.vllm_tensor_parallel_size > 1:
            raise ConfigError(f"--vllm_tensor_parallel_size {args.vllm_tensor_parallel_size}: a producer on CPU runs "
                              "one vLLM engine per process (give it GPUs with --rollout_gpus)")
        return args
    ids = " ".join(map(str, gpus))
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"--rollout_gpus {ids}: a GPU id is listed twice")
    if args.rollout_transport == "queue":
        raise ConfigError(f"--rollout_transport queue carries host tensors; a producer on --rollout_gpus {ids} takes "
                          "collective (NCCL)")
    if args.vllm_tensor_parallel_size > 1:
        raise ConfigError(f"--vllm_tensor_parallel_size {args.vllm_tensor_parallel_size}: a producer's engine runs on "
                          "one GPU (tensor parallelism across a producer's GPUs is not built)")
    local = local_world_size(world_size)
    if local % len(gpus):
        raise ConfigError(f"--rollout_gpus {ids}: {len(gpus)} GPU(s) must divide the {local} processes on this node "
                          "(each GPU holds the producers of as many processes)")
    return args


def resolve_batches(args: RLHFConfig, world_size: int) -> RLHFConfig:
    """A copy of ``args`` whose per-process prompt batch makes ``--global_batch_size`` on ``world_size``
    processes, and whose training micro batch divides the per-process mini-batch (``--ppo_mini_batch_size``, by
    default the whole rollout): the largest such micro batch <= ``--per_device_train_batch_size`` when the prompt
    batch is derived; otherwise it must divide it. The mini-batch must divide the per-process rollout."""
    prompts, micro = args.per_device_generation_batch_size, args.per_device_train_batch_size
    if args.global_batch_size is not None:  # a process's whole share in one generation batch
        prompts = split_global_batch(args.global_batch_size, world_size, args.global_batch_size)[0]
    rollouts = prompts * args.num_samples_per_prompt  # rollout_rows of the resolved flags
    rollout = (f"--per_device_generation_batch_size {prompts} x --num_samples_per_prompt "
               f"{args.num_samples_per_prompt}")
    mini = args.mini_batch_rows(rollouts)
    if rollouts % mini:
        raise ConfigError(f"--ppo_mini_batch_size {mini} must divide the {rollouts} rollout rows per process "
                          f"({rollout})")
    if args.global_batch_size is not None:  # the training micro batch a divisor of the mini-batch
        micro = split_global_batch(mini, 1, micro)[0]
    if mini % micro:
        batch = rollout if args.ppo_mini_batch_size is None else f"--ppo_mini_batch_size {mini}"
        raise ConfigError(f"{batch} must be a multiple of --per_device_train_batch_size {micro}")
    resolved = dataclasses.replace(args, per_device_generation_batch_size=prompts, per_device_train_batch_size=micro)
    announce_replaced(args, resolved, f"--global_batch_size {args.global_batch_size} on {world_size} processes "
                                      "(set --global_batch_size none to use the flag)")
    return resolved


# ---------------------------------------------------------------------------------------------- every stage


SUPERVISED_RULES: Tuple[Rule, ...] = (resolve_supervised_batches, resolve_zero)
RULES: Dict[str, Tuple[Rule, ...]] = {
    "sft": SUPERVISED_RULES, "rm": SUPERVISED_RULES, "dpo": SUPERVISED_RULES,
    "ppo": (resolve_algorithm, resolve_objective, resolve_environment, resolve_models, resolve_zero, resolve_engine,
            resolve_batches),
}
"""Each stage's cross-flag rules, in the order they apply (a rule may read what an earlier one filled in)."""


def resolve(stage: str, args: Any, world_size: int) -> Any:
    """``args`` of ``stage`` through every rule of :data:`RULES` for a launch of ``world_size`` processes: the
    resolved flags the run trains with, or the first rule's :class:`ConfigError`."""
    for rule in RULES[stage]:
        args = rule(args, world_size)
    return args
