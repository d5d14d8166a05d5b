"""Wrap a model in DeepSpeed: optimizer choice, LR schedule, LoRA, gradient checkpointing."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import deepspeed
import torch
from transformers import get_scheduler

from .ds_config import get_eval_ds_config, get_train_ds_config

NO_DECAY = ("bias", "norm.weight", "layernorm.weight", "ln_f.weight")


@dataclass(frozen=True)
class EngineConfig:
    """Everything DeepSpeed needs for one model; the stages build it from their flags (step 3 once per role).
    No defaults here: they live in the stage configs (``dschat/cli``)."""

    zero_stage: int
    dtype: str
    offload: bool
    offload_params: bool
    gradient_checkpointing: bool
    lora_dim: int
    lora_alpha: float
    lora_dropout: float
    micro_batch_size: int
    gradient_accumulation_steps: int
    learning_rate: float
    weight_decay: float
    adam_betas: Tuple[float, float]
    lr_scheduler_type: str
    warmup_steps: int
    gradient_clipping: float


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list:
    """AdamW groups: no weight decay on biases and normalisation weights."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if name.lower().endswith(NO_DECAY) else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]  # DeepSpeed drops empty groups; so do we


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, offload: bool,
                   betas: Tuple[float, float]):
    """DeepSpeedCPUAdam with optimizer offload, FusedAdam on GPU, torch AdamW on CPU (starts in ~1 s)."""
    groups = parameter_groups(model, weight_decay)
    if offload:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(groups, lr=lr, betas=betas)
    if torch.cuda.is_available():
        from deepspeed.ops.adam import FusedAdam

        return FusedAdam(groups, lr=lr, betas=betas)
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def apply_lora(model: torch.nn.Module, lora_dim: int, lora_alpha: float, lora_dropout: float, task_type: str):
    """Wrap ``model`` with peft LoRA adapters on every linear layer (base weights frozen)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora_dim, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                        target_modules="all-linear", task_type=task_type)
    if task_type == "SEQ_CLS":
        config.modules_to_save = ["score"]
    return get_peft_model(model, config)


def prepare_model(model: torch.nn.Module, args: EngineConfig, task_type: str = "CAUSAL_LM") -> torch.nn.Module:
    """Gradient checkpointing and LoRA as the stage's flags ask (LoRA with ZeRO stages 0-2: the resolver refuses
    ZeRO-3, ``dschat.stages.resolve.resolve_zero``)."""
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if args.lora_dim > 0:
        model = apply_lora(model, args.lora_dim, args.lora_alpha, args.lora_dropout, task_type)
    return model


def init_train_engine(model, config: EngineConfig, world_size: int, num_update_steps: int):
    """DeepSpeed engine with optimizer and a warmup + cosine/linear schedule over ``num_update_steps``."""
    ds_config = get_train_ds_config(
        micro_batch_size=config.micro_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        world_size=world_size,
        zero_stage=config.zero_stage,
        dtype=config.dtype,
        offload=config.offload,
        offload_params=config.offload_params,
        gradient_clipping=config.gradient_clipping,
    )
    optimizer = make_optimizer(model, config.learning_rate, config.weight_decay, config.offload, config.adam_betas)
    scheduler = get_scheduler(
        config.lr_scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=config.warmup_steps,
        num_training_steps=max(num_update_steps, 1),
    )
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    return engine


def init_eval_engine(model, config: EngineConfig, world_size: int, micro_batch_size: int):
    """DeepSpeed engine for a frozen model (no optimizer): ZeRO-3 shards it, other stages keep it whole."""
    model.requires_grad_(False)
    ds_config = get_eval_ds_config(micro_batch_size, world_size, config.zero_stage, config.dtype,
                                   config.offload_params)
    engine, *_ = deepspeed.initialize(model=model, config=ds_config)
    engine.eval()
    return engine
