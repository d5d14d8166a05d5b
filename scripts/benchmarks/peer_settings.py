"""The cost-relevant settings of the two sides of ``bench_vs_trl.py``, resolved into one vocabulary, and their
comparison: the benchmark prints them side by side and refuses to time sides whose settings differ.

A speed ratio between two trainers means something only if they do the same work: the same dtype (TRL's
configs default to bf16 autocast), the same recomputation (TRL's default gradient checkpointing), the same rows,
lengths, sampling, passes and optimizer steps, the same frozen models evaluated. Each side's settings are read
from what it built — the resolved config object and the state of the built models (``state``: compute dtype,
gradient checkpointing, whether a reference model runs, the prompt tokens fed), not from the flags asked for, so
a config field that a trainer ignores shows up as what it really does.

Pure functions of plain objects (no TRL, no torch): the tests build the configs by hand.
"""
from __future__ import annotations

from typing import Dict, List, Optional

GRPO_KEYS = (
    "actor", "reward model", "compute dtype", "gradient checkpointing", "dropout", "prompts per step",
    "samples per prompt", "rows per generate call", "rows per forward/backward", "passes over a rollout",
    "optimizer steps per rollout", "max prompt tokens", "prompt tokens fed", "max new tokens", "stop at eos",
    "temperature", "top-k", "top-p", "other sampling filters", "log-prob temperature", "KL coefficient",
    "KL estimator", "reference model forward", "learning rate", "LR schedule", "Adam betas", "weight decay",
    "gradient clipping", "log every N steps",
)
"""The settings compared for ``--algo grpo``, in print order."""

PPO_KEYS = GRPO_KEYS + (
    "critic", "mini-batches per pass", "GAE gamma", "GAE lambda", "whiten advantages", "whiten rewards",
    "clip epsilon", "value clip",
)
"""The settings compared for ``--algo ppo`` (token-level PPO: ``--ngram 1``)."""

TRL_GRPO_KL_ESTIMATOR = "k3"
"""TRL's GRPO loss adds β·(exp(ref − logp) − (ref − logp) − 1) per token: Schulman's k3, with no option."""
TRL_PPO_SAMPLING = {"top-k": 0, "top-p": 1.0}
"""TRL's PPOTrainer.train samples with ``top_k=0, top_p=1.0`` whatever the config says (no field); a timed run
reports the generation config it really used instead (``state["generation"]``)."""


def schedule(kind: str, warmup: int) -> str:
    """One name for an LR schedule: a constant one with no warmup is ``constant`` under either name."""
    if kind in ("constant", "constant_with_warmup") and warmup == 0:
        return "constant"
    return f"{kind}, {warmup} warmup steps"


def dtype_name(mixed_precision: str, param_dtype: str) -> str:
    """The dtype the matmuls run in: an autocast (``bf16`` / ``fp16`` mixed precision) wins over the weights'."""
    return param_dtype if mixed_precision in (None, "no") else mixed_precision


def sampling_filters(min_p: Optional[float], repetition_penalty: float) -> str:
    """TRL's extra sampling knobs, which the project does not have: ``none`` when both are off."""
    parts = ([f"min_p={min_p}"] if min_p else []) + (
        [f"repetition_penalty={repetition_penalty}"] if repetition_penalty != 1.0 else [])
    return ", ".join(parts) or "none"


def project_settings(args, state: dict) -> Dict[str, object]:
    """The project's side from its resolved step-3 config ``args`` (``RLHFConfig`` after ``resolve_*``) and the
    built models' ``state``."""
    rows = args.per_device_generation_batch_size * args.num_samples_per_prompt
    mini = args.mini_batch_rows(rows)
    settings = {
        "actor": args.actor_model_name_or_path,
        "reward model": args.reward_model_name_or_path,
        "compute dtype": dtype_name("no", state["param_dtype"]),
        "gradient checkpointing": state["gradient_checkpointing"],
        "dropout": "off",  # step 3 runs every model without dropout (RLHFConfig.__post_init__)
        "prompts per step": args.per_device_generation_batch_size,
        "samples per prompt": args.num_samples_per_prompt,
        "rows per generate call": rows,
        "rows per forward/backward": args.per_device_train_batch_size,
        "passes over a rollout": args.ppo_epochs,
        "optimizer steps per rollout": args.optimizer_steps_per_rollout(rows),
        "max prompt tokens": args.max_prompt_seq_len,
        "prompt tokens fed": state["prompt_tokens"],
        "max new tokens": args.max_new_tokens,
        "stop at eos": True,
        "temperature": args.temperature,
        "top-k": args.top_k,
        "top-p": args.top_p,
        "other sampling filters": "none",
        "log-prob temperature": 1.0 if args.logprobs_at_unit_temperature else args.temperature,
        "KL coefficient": args.kl_coef,
        "KL estimator": args.kl_estimator,
        "reference model forward": state["reference_model"],
        "learning rate": (args.actor_learning_rate if args.algo != "ppo"
                          else f"actor {args.actor_learning_rate}, critic {args.critic_learning_rate}"),
        "LR schedule": schedule(args.lr_scheduler_type, args.warmup_steps or 0),
        "Adam betas": (args.adam_beta1, args.adam_beta2),
        "weight decay": args.weight_decay,
        "gradient clipping": args.gradient_clipping,
        "log every N steps": args.log_steps,
    }
    if args.algo == "ppo":
        settings.update({
            "critic": args.critic_model_name_or_path,
            "mini-batches per pass": rows // mini,
            "GAE gamma": args.gamma,
            "GAE lambda": args.lam,
            "whiten advantages": args.whiten_advantages,
            "whiten rewards": False,
            "clip epsilon": args.clip_eps,
            "value clip": args.value_clip,
        })
    return settings


def trl_grpo_settings(config, state: dict) -> Dict[str, object]:
    """TRL's side from a resolved ``trl.GRPOConfig`` and the built ``GRPOTrainer``'s ``state``."""
    rows = config.generation_batch_size
    micro_steps = config.steps_per_generation * config.num_iterations  # micro-batches between generations
    return {
        "actor": state["actor"],
        "reward model": state["reward model"],
        "compute dtype": dtype_name(state["mixed_precision"], state["param_dtype"]),
        "gradient checkpointing": state["gradient_checkpointing"],
        "dropout": "off" if config.disable_dropout else "the model's",
        "prompts per step": rows // config.num_generations,
        "samples per prompt": config.num_generations,
        "rows per generate call": rows,
        "rows per forward/backward": config.per_device_train_batch_size,
        "passes over a rollout": config.num_iterations,
        "optimizer steps per rollout": micro_steps // config.gradient_accumulation_steps,
        "max prompt tokens": getattr(config, "max_prompt_length", None) or state["prompt_limit"],
        "prompt tokens fed": state["prompt_tokens"],
        "max new tokens": config.max_completion_length,
        "stop at eos": True,
        "temperature": config.temperature,
        "top-k": config.top_k,
        "top-p": config.top_p,
        "other sampling filters": sampling_filters(config.min_p, config.repetition_penalty),
        "log-prob temperature": config.temperature,
        "KL coefficient": config.beta,
        "KL estimator": TRL_GRPO_KL_ESTIMATOR,
        "reference model forward": state["reference_model"],
        "learning rate": config.learning_rate,
        "LR schedule": schedule(config.lr_scheduler_type, config.warmup_steps),
        "Adam betas": (config.adam_beta1, config.adam_beta2),
        "weight decay": config.weight_decay,
        "gradient clipping": config.max_grad_norm,
        "log every N steps": config.logging_steps,
    }


def trl_ppo_settings(config, state: dict) -> Dict[str, object]:
    """TRL's side from a resolved ``PPOConfig`` (``trl.experimental.ppo``) and the built ``PPOTrainer``'s
    ``state``; the sampling is what a timed run's generate call used (``state["generation"]``) when known."""
    generation = {"temperature": config.temperature, **TRL_PPO_SAMPLING, **state.get("generation", {})}
    micro_batches = config.local_batch_size // config.per_device_train_batch_size
    return {
        "actor": state["actor"],
        "reward model": state["reward model"],
        "compute dtype": dtype_name(state["mixed_precision"], state["param_dtype"]),
        "gradient checkpointing": state["gradient_checkpointing"],
        "dropout": "off",  # PPOTrainer disables dropout in all four models
        "prompts per step": config.local_batch_size,
        "samples per prompt": 1,
        "rows per generate call": min(config.local_rollout_forward_batch_size, config.local_batch_size),
        "rows per forward/backward": config.per_device_train_batch_size,
        "passes over a rollout": config.num_ppo_epochs,
        # one optimizer step per gradient_accumulation_steps micro-batches (accelerate), whatever the mini-batches
        "optimizer steps per rollout": config.num_ppo_epochs * micro_batches // config.gradient_accumulation_steps,
        "max prompt tokens": state["prompt_limit"],
        "prompt tokens fed": state["prompt_tokens"],
        "max new tokens": config.response_length,
        "stop at eos": config.stop_token == "eos" or (
            config.stop_token_id is not None and config.stop_token_id == state["eos_token_id"]),
        "temperature": round(generation["temperature"], 6),  # TRL samples at temperature + 1e-7
        "top-k": generation["top-k"],
        "top-p": generation["top-p"],
        "other sampling filters": "none",
        "log-prob temperature": config.temperature,
        "KL coefficient": config.kl_coef,
        "KL estimator": config.kl_estimator,
        "reference model forward": state["reference_model"],
        "learning rate": f"actor {config.learning_rate}, critic {config.learning_rate}",  # one optimizer
        "LR schedule": schedule(config.lr_scheduler_type, config.warmup_steps),
        "Adam betas": (config.adam_beta1, config.adam_beta2),
        "weight decay": config.weight_decay,
        "gradient clipping": 0.0,  # PPOTrainer.train steps the optimizer without clipping, whatever max_grad_norm
        "log every N steps": 1,  # PPOTrainer.train logs every update whatever logging_steps says
        "critic": state["critic"],
        "mini-batches per pass": config.num_mini_batches,
        "GAE gamma": config.gamma,
        "GAE lambda": config.lam,
        "whiten advantages": True,  # PPOTrainer.train always whitens the advantages (no option)
        "whiten rewards": config.whiten_rewards,
        "clip epsilon": config.cliprange,
        "value clip": config.cliprange_value,
    }


def comparable(value):
    """JSON turns tuples into lists and ints into floats only where they were floats: compare normalised."""
    if isinstance(value, (list, tuple)):
        return tuple(comparable(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def differences(project: dict, trl: dict, keys) -> List[str]:
    """The settings of ``keys`` whose values differ, each as one line naming it and both values."""
    return [f"{key}: project {project.get(key)!r}, TRL {trl.get(key)!r}" for key in keys
            if comparable(project.get(key)) != comparable(trl.get(key))]


def settings_table(project: dict, trl: dict, keys) -> str:
    """Both sides' settings side by side, a ``!=`` marking each difference."""
    width = max(len(key) for key in keys) + 2
    lines = [f"{'setting':<{width}}{'project':<44}TRL"]
    for key in keys:
        mark = "" if comparable(project.get(key)) == comparable(trl.get(key)) else "   != "
        lines.append(f"{key:<{width}}{str(project.get(key)):<44}{trl.get(key)}{mark}")
    return "\n".join(lines)
