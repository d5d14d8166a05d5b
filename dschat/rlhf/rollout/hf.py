"""The ``hf`` rollout engine: transformers ``generate`` on the training engine's own module (nothing to sync).

Under ZeRO-3 the parameters are gathered once for the whole call and DeepSpeed's module hooks are taken off
while decoding (TRL's ``unwrap_model_for_generation``): with the hooks on, every forward of every decoding step
still runs ZeRO-3's fetch/release bookkeeping and, with several processes, its collectives, so every process had
to keep decoding until the slowest finished (``synced_gpus``). With ``--no_gather_for_generation`` (a model too
big to gather) the hooks stay and fetch each layer per step.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import deepspeed
import torch

from dschat.rlhf.experience import EntropyRecorder, SamplingConfig

from .base import Rollout, RolloutEngine


@contextlib.contextmanager
def zero3_hooks_removed(engine):
    """Take DeepSpeed ZeRO-3's module hooks off ``engine.module`` for the block (its parameters must be gathered
    by the caller) and put them back after; a no-op for other stages."""
    offload = getattr(getattr(engine, "optimizer", None), "parameter_offload", None)
    if offload is None:
        yield
        return
    for param in engine.module.parameters():
        param.ds_active_sub_modules.clear()
    for hook in offload.forward_hooks + offload.backward_hooks:
        hook.remove()
    offload.forward_hooks, offload.backward_hooks = [], []
    try:
        yield
    finally:
        offload._register_deepspeed_module(offload.module)


@torch.no_grad()
def generate(engine, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling: SamplingConfig,
             pad_token_id: int, eos_token_id: int, gather_parameters: bool = True,
             world_size: int = 1, logits_processor: Optional[list] = None, compile: bool = False) -> torch.Tensor:
    """Sample responses with the actor ``engine`` (DeepSpeed): ``[B, P + max_new_tokens]``, every row padded
    after its eos. Under ZeRO-3 the parameters are gathered once for the whole call and the module hooks are off
    (module docstring); with ``gather_parameters=False`` they are fetched per layer, and with several processes
    ``synced_gpus`` keeps every process decoding until all have finished (each forward then runs collectives,
    whose sequence must match across processes). ``logits_processor``: extra processors on the raw logits before
    the sampling warpers (e.g. an :class:`~dschat.rlhf.experience.EntropyRecorder`). ``compile``: a static KV
    cache and transformers' compiled forward."""
    zero3 = engine.zero_optimization_stage() == 3
    model = engine.module
    gathered = zero3 and gather_parameters
    context = contextlib.ExitStack()
    if gathered:
        context.enter_context(deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None))
        context.enter_context(zero3_hooks_removed(engine))
    was_training = model.training
    model.eval()
    with context:
        seq = model.generate(
            input_ids=prompts, attention_mask=prompt_mask, max_new_tokens=sampling.max_new_tokens,
            do_sample=sampling.do_sample, temperature=sampling.temperature if sampling.do_sample else None,
            top_k=sampling.top_k if sampling.do_sample else None, top_p=sampling.top_p if sampling.do_sample else None,
            pad_token_id=pad_token_id, eos_token_id=eos_token_id,
            synced_gpus=zero3 and not gathered and world_size > 1, use_cache=True, logits_processor=logits_processor,
            **({"cache_implementation": "static"} if compile else {}),
        )
    model.train(was_training)
    max_len = prompts.shape[1] + sampling.max_new_tokens
    if seq.shape[1] < max_len:  # every sample stopped early: pad so shapes are fixed per call
        seq = torch.nn.functional.pad(seq, (0, max_len - seq.shape[1]), value=pad_token_id)
    return seq


class HFRolloutEngine(RolloutEngine):
    """Generates with the actor itself; records the policy's entropy per token with a logits processor."""

    def __init__(self, actor, pad_token_id: int, eos_token_id: int, gather_parameters: bool = True,
                 world_size: int = 1, compile: bool = False):
        super().__init__(actor)
        self.pad_token_id, self.eos_token_id = pad_token_id, eos_token_id
        self.gather_parameters, self.world_size, self.compile = gather_parameters, world_size, compile
        self.stale = False  # the actor is the engine

    def mark_stale(self) -> None:
        """Nothing to load: the next rollout runs on the updated actor."""

    def sample(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling: SamplingConfig,
               record_entropy: bool) -> Rollout:
        recorder = EntropyRecorder(sampling.temperature) if record_entropy else None
        seq = generate(self.actor, prompts, prompt_mask, sampling, self.pad_token_id, self.eos_token_id,
                       gather_parameters=self.gather_parameters, world_size=self.world_size,
                       logits_processor=None if recorder is None else [recorder], compile=self.compile)
        return Rollout(seq, entropy=None if recorder is None else recorder.entropies(seq, prompts.shape[1]))
