"""The four models of RLHF (paper §B.2): actor (from SFT), frozen reference (SFT), critic (from the RM, or from
the SFT model for code tasks) and frozen reward model — each wrapped by DeepSpeed with its own ZeRO stage.
Critic-free algorithms (``--algo rloo | grpo | reinforce``, Appendix C.3) get no critic at all."""
from __future__ import annotations

from types import SimpleNamespace

from dschat.rlhf.baselines import get_algorithm
from dschat.utils.engine import init_eval_engine, init_train_engine, prepare_model
from dschat.utils.model import load_causal_lm, load_reward_model


def _role_args(args, role: str) -> SimpleNamespace:
    """The generic engine flags for one model, read from the ``--{role}_*`` flags of step 3."""
    return SimpleNamespace(
        zero_stage=getattr(args, f"{role}_zero_stage"),
        gradient_checkpointing=getattr(args, f"{role}_gradient_checkpointing", False),
        lora_dim=getattr(args, f"{role}_lora_dim", 0),
        lora_alpha=args.lora_alpha,
        lora_dropout=0.0,
        dtype=args.dtype,
        offload=args.offload,
        offload_params=args.offload_params,
        gradient_accumulation_steps=(args.per_device_generation_batch_size * args.num_samples_per_prompt
                                     // args.per_device_training_batch_size),
        per_device_train_batch_size=args.per_device_training_batch_size,
        weight_decay=args.weight_decay,
        lr_scheduler_type=args.lr_scheduler_type,
        warmup_ratio=0.0,
        gradient_clipping=args.gradient_clipping,
    )


class RLHFEngine:
    """Creates and holds ``actor``, ``ref``, ``critic`` (None for critic-free ``--algo``) and (unless the reward
    is code execution) ``reward``."""

    def __init__(self, args, tokenizer, world_size: int, num_update_steps: int):
        actor_args = _role_args(args, "actor")
        critic_args = _role_args(args, "critic")
        actor = load_causal_lm(args.actor_model_name_or_path, tokenizer, args.dtype, args.seed)
        self.actor = init_train_engine(prepare_model(actor, actor_args), actor_args, world_size, num_update_steps,
                                       lr=args.actor_learning_rate, warmup_steps=args.num_warmup_steps)
        reference = load_causal_lm(args.actor_model_name_or_path, tokenizer, args.dtype, args.seed)
        self.ref = init_eval_engine(reference, actor_args, world_size, args.per_device_generation_batch_size)
        self.critic = None
        if get_algorithm(args.algo).needs_critic:
            critic = load_reward_model(args.critic_model_name_or_path, tokenizer, args.dtype, args.seed,
                                       require_head=args.reward == "model")  # code: critic from SFT (§B.5)
            self.critic = init_train_engine(prepare_model(critic, critic_args, task_type="SEQ_CLS"), critic_args,
                                            world_size, num_update_steps, lr=args.critic_learning_rate,
                                            warmup_steps=args.num_warmup_steps)
        self.reward = None
        if args.reward == "model":
            reward = load_reward_model(args.reward_model_name_or_path, tokenizer, args.dtype, args.seed,
                                       require_head=True)
            self.reward = init_eval_engine(reward, critic_args, world_size, args.per_device_generation_batch_size)
