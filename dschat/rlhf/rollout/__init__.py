"""Rollout engines: what samples step 3's responses (``--rollout_engine``), for training and evaluation alike.

The trainer asks an engine for rollouts and tells it when the actor changed; it never branches on which engine
runs. ``hf`` (:mod:`.hf`) generates with transformers on the training engine itself (nothing to sync);
``vllm`` (:mod:`.vllm_engine`) runs a vLLM engine colocated in each training process (TRL's colocate pattern)
and copies the actor's weights into it before the first rollout after every update (:mod:`.weights`). The
old log-probs are always the trainer's own; an engine that returns its sampled-token log-probs lets step 3
measure and correct the gap (``--rollout_is``, :mod:`dschat.rlhf.macro_action.correction`).
"""
from __future__ import annotations

import logging

from .base import PlainModel, Rollout, RolloutEngine


def build_rollout_engine(args, actor, tokenizer, world_size: int, upcoming=None, rank: int = 0,
                         env_tasks=None) -> RolloutEngine:
    """The engine ``--rollout_engine`` names, for the DeepSpeed-wrapped ``actor`` of resolved step-3 flags; with
    ``--async_rollout K`` a producer process running that engine K iterations ahead (:mod:`.producer`), which
    samples the prompts ``upcoming(i)`` yields from iteration i on (with ``--env`` the episodes of ``env_tasks``).
    With producers on GPUs of their own (``--rollout_gpus``) the training GPUs hold no vLLM engine: evaluation
    samples with transformers there."""
    current = _synchronous_engine(args, actor, tokenizer, world_size, "hf" if args.rollout_gpus else args.rollout_engine)
    if not args.async_rollout:
        return current
    from dschat.core.launch import local_rank, local_world_size

    from .producer import AsyncRolloutEngine, ProducerSpec, producer_devices

    if args.rollout_is == "none":
        logging.getLogger(__name__).warning(
            "--async_rollout %d with --rollout_is none: rollouts up to %d policy versions old are trained on "
            "uncorrected (the gap is only measured, rollout/logprob_abs_diff); --rollout_is macro corrects it",
            args.async_rollout, args.async_rollout)
    module = actor.module.get_base_model() if hasattr(actor.module, "get_base_model") else actor.module
    spec = ProducerSpec(engine=args.rollout_engine, config=module.config, dtype=args.dtype,
                        tokenizer=tokenizer, pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=tokenizer.eos_token_id,
                        logprob_temperature=1.0 if args.logprobs_at_unit_temperature else args.temperature,
                        threads=args.rollout_threads, seed=args.seed + rank,
                        max_model_len=args.max_prompt_seq_len + generated_tokens(args),
                        devices=producer_devices(args.rollout_gpus, local_rank(),
                                                 local_world_size(world_size)),
                        gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                        transport=rollout_transport(args), timeout=args.rollout_timeout,
                        episodes=None if args.env is None else (args.env, tuple(env_tasks), args.max_turns,
                                                                 args.max_episode_tokens),
                        startup_timeout=args.rollout_startup_timeout,
                        partial_chunk=args.partial_rollout_chunk if args.partial_rollout else 0)
    return AsyncRolloutEngine(actor, current, spec, args.async_rollout, upcoming, args.rollout_timeout)


def generated_tokens(args) -> int:
    """How far a context grows past its prompt: an ``--env`` episode's whole token budget, a response's reply."""
    return args.max_episode_tokens if args.env else args.max_new_tokens


def rollout_transport(args) -> str:
    """``--rollout_transport``, with ``auto`` resolved: ``collective`` for a producer on GPUs, ``queue`` on CPU."""
    if args.rollout_transport != "auto":
        return args.rollout_transport
    return "collective" if args.rollout_gpus else "queue"


def _synchronous_engine(args, actor, tokenizer, world_size: int, engine: str) -> RolloutEngine:
    if engine == "vllm":
        from .vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(actor, tokenizer, dtype=args.dtype,
                                 max_model_len=args.max_prompt_seq_len + generated_tokens(args),
                                 tensor_parallel_size=args.vllm_tensor_parallel_size,
                                 gpu_memory_utilization=args.vllm_gpu_memory_utilization, world_size=world_size,
                                 logprobs_at_unit_temperature=args.logprobs_at_unit_temperature)
    from .hf import HFRolloutEngine

    return HFRolloutEngine(actor, tokenizer.pad_token_id, tokenizer.eos_token_id,
                           gather_parameters=not args.no_gather_for_generation, world_size=world_size,
                           compile=args.generation_compile)


__all__ = ["PlainModel", "Rollout", "RolloutEngine", "build_rollout_engine"]
