"""One DeepSpeed config builder used by every stage (ZeRO 0-3, offload, dtype, batch sizes)."""
from __future__ import annotations

from typing import Optional


def get_train_ds_config(
    micro_batch_size: int,
    gradient_accumulation_steps: int = 1,
    world_size: int = 1,
    zero_stage: int = 0,
    dtype: str = "fp32",
    offload: bool = False,
    offload_params: bool = False,
    gradient_clipping: float = 1.0,
    steps_per_print: int = 10**9,
    global_batch_size: Optional[int] = None,
) -> dict:
    """A DeepSpeed training config.

    ``global_batch_size`` (optional) must equal micro × accumulation × world size; it is checked here so a
    wrong launch fails before any model is built. ``offload`` moves optimizer state to CPU, ``offload_params``
    (ZeRO-3 only: the resolver refuses it under another stage, ``dschat.stages.resolve.resolve_zero``) the
    parameters too.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"--zero_stage {zero_stage}: expected 0, 1, 2 or 3")
    if dtype not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"--dtype {dtype}: expected fp32, bf16 or fp16")
    train_batch = micro_batch_size * gradient_accumulation_steps * world_size
    if global_batch_size is not None and global_batch_size != train_batch:
        raise ValueError(
            f"--global_batch_size {global_batch_size} != micro batch {micro_batch_size} x gradient accumulation "
            f"{gradient_accumulation_steps} x world size {world_size} = {train_batch}"
        )
    zero = {
        "stage": zero_stage,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "stage3_param_persistence_threshold": 1e4,
        "stage3_max_live_parameters": 3e7,
        "stage3_prefetch_bucket_size": 3e7,
        "stage3_gather_16bit_weights_on_model_save": True,
    }
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload_params and zero_stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_batch_size": train_batch,
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "steps_per_print": steps_per_print,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == "bf16"},
        "fp16": {"enabled": dtype == "fp16", "loss_scale_window": 100},
        "gradient_clipping": gradient_clipping,
        "prescale_gradients": False,
        "wall_clock_breakdown": False,
    }


def get_eval_ds_config(micro_batch_size: int, world_size: int = 1, zero_stage: int = 0, dtype: str = "fp32",
                       offload_params: bool = False) -> dict:
    """A DeepSpeed config for a frozen model (reference or reward model in PPO): no optimizer."""
    zero = {"stage": zero_stage if zero_stage == 3 else 0, "stage3_param_persistence_threshold": 1e4}
    if offload_params and zero_stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_batch_size": micro_batch_size * world_size,
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "steps_per_print": 10**9,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == "bf16"},
        "fp16": {"enabled": dtype == "fp16"},
        "wall_clock_breakdown": False,
    }
