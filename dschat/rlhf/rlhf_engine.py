"""The four models of RLHF (paper §B.2): actor (from SFT), frozen reference (SFT), critic (from the RM, or from
the SFT model for code tasks) and frozen reward model — each wrapped by DeepSpeed with its own ZeRO stage, all
without dropout. Critic-free algorithms (``--algo rloo | grpo | reinforce``, Appendix C.3) get no critic at all."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from dschat.rlhf.advantage_estimators import get_algorithm
from dschat.training.engine import EngineConfig, init_eval_engine, init_train_engine, prepare_model
from dschat.model import ACTOR_SUBDIR, load_causal_lm, load_reward_model


@dataclass(frozen=True)
class RoleSettings:
    """A trained model's own engine settings (step 3's ``--actor_*`` / ``--critic_*``); the others are shared."""

    zero_stage: int
    gradient_checkpointing: bool
    lora_dim: int
    learning_rate: float


def actor_settings(args) -> RoleSettings:
    """The actor's (and the reference's) own flags."""
    return RoleSettings(args.actor_zero_stage, args.actor_gradient_checkpointing, args.actor_lora_dim,
                        args.actor_learning_rate)


def critic_settings(args) -> RoleSettings:
    """The critic's own flags."""
    return RoleSettings(args.critic_zero_stage, args.critic_gradient_checkpointing, args.critic_lora_dim,
                        args.critic_learning_rate)


def role_config(args, role: RoleSettings, num_iterations: int) -> EngineConfig:
    """The DeepSpeed settings of a trained model from its ``role`` settings and step 3's shared flags: each
    optimizer step accumulates a mini-batch of the per-process rollouts (by default all of them) in micro batches.
    The warmup (``--warmup_steps`` counts PPO iterations) is in optimizer steps, like the schedule
    (:func:`schedule_steps`)."""
    rollouts = rollout_rows(args)
    return EngineConfig(
        zero_stage=role.zero_stage, dtype=args.dtype, offload=args.offload, offload_params=args.offload_params,
        gradient_checkpointing=role.gradient_checkpointing, lora_dim=role.lora_dim, lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout, micro_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.mini_batch_rows(rollouts) // args.per_device_train_batch_size,
        learning_rate=role.learning_rate, weight_decay=args.weight_decay,
        adam_betas=(args.adam_beta1, args.adam_beta2), lr_scheduler_type=args.lr_scheduler_type,
        warmup_steps=args.warmup(num_iterations) * args.optimizer_steps_per_rollout(rollouts),
        gradient_clipping=args.gradient_clipping)


def rollout_rows(args) -> int:
    """Rollout rows per process and PPO iteration: prompts × samples per prompt."""
    return args.per_device_generation_batch_size * args.num_samples_per_prompt


def schedule_steps(args, num_iterations: int) -> int:
    """Optimizer steps of a run of ``num_iterations`` PPO iterations, the length of every LR schedule (not the
    iterations: with ``--ppo_epochs 2`` a schedule sized in iterations would reach its end halfway)."""
    return num_iterations * args.optimizer_steps_per_rollout(rollout_rows(args))


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with dropout off in every module, as TRL runs RLHF: the rollout's old log-probs and values
    (no-grad, eval mode) and the update's (train mode) must come from the same function, or the ratio is not 1
    before any update. Dropout layers (LoRA's too) get p = 0, and so do the float rates that attention
    implementations read in train mode (Gemma's and Llama's ``attention_dropout``, OPT's ``dropout``). The
    saved configs keep their rates."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for name in [n for n, value in vars(module).items() if "dropout" in n and isinstance(value, float)]:
            setattr(module, name, 0.0)
    return model


def reward_config(args, critic_config: EngineConfig) -> EngineConfig:
    """The DeepSpeed settings of the frozen reward model: its own ZeRO stage (``ModelsArgs.reward_model_zero_stage``) and
    parameter offload (``--reward_offload_params`` or the shared ``--offload_params``)."""
    return dataclasses.replace(critic_config, zero_stage=args.reward_model_zero_stage(),
                               offload_params=args.offload_params or args.reward_offload_params)


class RLHFEngine:
    """Creates and holds ``actor``, ``ref``, ``critic`` (None for critic-free ``--algo``) and (unless the reward
    is code execution) ``reward``."""

    def __init__(self, args, tokenizer, world_size: int, num_iterations: int):
        actor_config = role_config(args, actor_settings(args), num_iterations)
        critic_config = role_config(args, critic_settings(args), num_iterations)
        num_update_steps = schedule_steps(args, num_iterations)
        actor = load_causal_lm(args.actor_model_name_or_path, tokenizer, args.dtype, args.seed)
        self.actor = init_train_engine(disable_dropout(prepare_model(actor, actor_config)), actor_config,
                                       world_size, num_update_steps)
        reference = load_causal_lm(args.actor_model_name_or_path, tokenizer, args.dtype, args.seed)
        self.ref = init_eval_engine(disable_dropout(reference), actor_config, world_size,
                                    args.per_device_generation_batch_size)
        self.critic = None
        if get_algorithm(args.algo).needs_critic:
            critic = load_reward_model(args.critic_model_name_or_path, tokenizer, args.dtype, args.seed,
                                       require_head=args.reward == "model")  # code: critic from SFT (§B.5)
            critic = disable_dropout(prepare_model(critic, critic_config, task_type="SEQ_CLS"))
            self.critic = init_train_engine(critic, critic_config, world_size, num_update_steps)
        self.reward = None
        if args.reward == "model":
            reward = load_reward_model(args.reward_model_name_or_path, tokenizer, args.dtype, args.seed,
                                       require_head=True)
            self.reward = init_eval_engine(disable_dropout(reward), reward_config(args, critic_config), world_size,
                                           args.per_device_generation_batch_size)

    @property
    def trained(self) -> dict:
        """The engines step 3 updates, by role: the actor, and the critic when the algorithm has one. "No
        critic" is asked here once; what treats the trained models alike reads this: their train / eval mode,
        the ``lr/<role>`` metrics and the checkpointed folders ``<output_dir>/<role>``. (A null critic object
        would still need this test for the checkpoints, the lr metrics and the saved folders.)"""
        return {ACTOR_SUBDIR: self.actor, **({"critic": self.critic} if self.critic is not None else {})}
