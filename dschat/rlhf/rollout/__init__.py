"""Rollout engines: what samples step 3's responses (``--rollout_engine``), for training and evaluation alike.

The trainer asks an engine for rollouts and tells it when the actor changed; it never branches on which engine
runs. ``hf`` (:mod:`.hf`) generates with transformers on the training engine itself (nothing to sync);
``vllm`` (:mod:`.vllm_engine`) runs a vLLM engine colocated in each training process (TRL's colocate pattern)
and copies the actor's weights into it before the first rollout after every update (:mod:`.weights`). The
old log-probs are always the trainer's own; an engine that returns its sampled-token log-probs lets step 3
measure and correct the gap (``--rollout_is``, :mod:`dschat.rlhf.macro_action.correction`).
"""
from __future__ import annotations

from .base import PlainModel, Rollout, RolloutEngine


def build_rollout_engine(args, actor, tokenizer, world_size: int) -> RolloutEngine:
    """The engine ``--rollout_engine`` names, for the DeepSpeed-wrapped ``actor`` of resolved step-3 flags."""
    if args.rollout_engine == "vllm":
        from .vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(actor, tokenizer, dtype=args.dtype,
                                 max_model_len=args.max_prompt_seq_len + args.max_new_tokens,
                                 tensor_parallel_size=args.vllm_tensor_parallel_size,
                                 gpu_memory_utilization=args.vllm_gpu_memory_utilization, world_size=world_size,
                                 logprobs_at_unit_temperature=args.logprobs_at_unit_temperature)
    from .hf import HFRolloutEngine

    return HFRolloutEngine(actor, tokenizer.pad_token_id, tokenizer.eos_token_id,
                           gather_parameters=not args.no_gather_for_generation, world_size=world_size,
                           compile=args.generation_compile)


__all__ = ["PlainModel", "Rollout", "RolloutEngine", "build_rollout_engine"]
