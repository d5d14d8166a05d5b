"""The ``vllm`` rollout engine: a vLLM engine colocated in each training process (TRL's colocate pattern).

Built once per process from the actor's config and tokenizer with dummy weights (no checkpoint is read twice; an
in-memory model such as ``tiny-gemma`` works too), then loaded with the actor's weights before the first rollout
and after every update (:mod:`.weights`: Hugging Face names, LoRA merged, ZeRO-3 gathered in bounded groups)
through ``collective_rpc`` → ``model.load_weights``, vLLM's own loader (it fuses q/k/v and gate/up and skips a
tied lm_head). The engine runs in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``); with several
processes each has its own engine (``distributed_executor_backend="external_launcher"``, as TRL).

Sampling follows the HF engine's semantics: temperature, top-k (0 = off), top-p, ``max_new_tokens``, stop after
the tokenizer's eos (kept in the response), pad after it, token ids as sampled (no detokenisation), greedy when
``do_sample`` is off. Each row gets its own sampling seed drawn from torch's global generator, so the run's seed,
``--eval_seed`` and ``--resume`` (which restores that generator) fix the samples. Building an in-process
``vllm.LLM`` seeds Python's, NumPy's and torch's global generators with vLLM's ``seed`` (0); the engine restores
their states after building it, so the run's seed, not vLLM's, governs every draw after it. The engine returns the
log-prob of each sampled token in the trainer's convention: log_softmax(logits / T) before top-k / top-p
(:func:`_untruncated_logprobs`; vLLM's own "processed" log-probs are taken after the truncation, so with Table 5's
top-k 50 their gap to the trainer's would measure the truncated mass, not the engine), or of the raw logits with
``--logprobs_at_unit_temperature``.

On the CPU backend vLLM packs each linear layer's weight into a kernel buffer after loading and drops the plain
tensor. What plain vLLM 0.32 then does with new weights is measured by ``scripts/benchmarks/vllm_weight_paths.py``
(output ``docs/rollout/vllm_weight_paths_cpu.txt``: tiny Gemma and SmolLM2-135M, 10 syncs, an Intel Xeon with
AVX-512): ``model.load_weights`` raises ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``
part-way; ``model_runner.reload_weights(weights_iterator=...)`` runs, but vLLM then computes with neither the new
weights nor the first, and called once per gathered group that splits a fused
layer (q_proj apart from k_proj) it gives NaN log-probs (an outside check found ``reload_weights`` exact on another
machine: it depends on the machine). Here the plain weights are kept beside the packed ones
(:func:`_keep_cpu_weights`), loaded with ``load_weights`` a group at a time, and every layer is packed again after
the last group (:func:`_repack`): Hugging Face's log-probs to fp32 rounding after every sync, whole or per
module, at about a reload's time, for the kept weights' memory (the README quotes the figures).
Sleep mode (weights and KV cache released between phases) runs on GPUs only; on CPU vLLM does not support it,
which the log says once. A producer decoding in chunks (``--partial_rollout``, :mod:`.partial`: each chunk is one
``generate`` call) keeps its engine awake (``sleep_between_rollouts``). Loading weights resets vLLM's prefix cache:
a prompt seen before (an evaluation prompt, a partial rollout's prefix) is then prefilled by the new weights.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from typing import List, Tuple

import torch

from dschat.rlhf.experience import SamplingConfig
from dschat.core.seeding import rng_state, set_rng_state

from .base import Rollout, RolloutEngine
from .weights import exported_weights

logger = logging.getLogger(__name__)

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
CPU_KV_CACHE_GIB = "1"
"""vLLM's CPU KV cache when ``VLLM_CPU_KVCACHE_SPACE`` is unset (GiB; vLLM's own default is 4)."""


STARTUP_NOISE = (
    "Chat template warmup failed",  # a traceback: the engine never renders chat (skip_tokenizer_init)
    "The global random seed is set to",  # the engine restores the caller's generators after vLLM's seeding
    "Enforce eager set", "Inductor compilation was disabled",  # what --enforce_eager asks for, on CPU
    "Triton is", "Model Runner V2 requires Triton",  # no Triton on the CPU backend, by design
    "Reset SSM cache type",  # models without state-space layers
    "CPU backend doesn't allow to use `torch.set_num_threads`",  # the process keeps its own thread count
    "Using None for EOS token id",  # the engine stops at the tokenizer's eos itself (stop_token_ids)
)
"""Openings of vLLM's start-up log lines that say nothing a user of the engine can act on (each with why); they are
dropped (:class:`StartupNoise`). vLLM's other warnings pass, e.g. a model's config corrected or LD_PRELOAD advice."""


class StartupNoise(logging.Filter):
    """A log filter that drops the records whose message opens with one of :data:`STARTUP_NOISE`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(STARTUP_NOISE)


def filter_startup_noise() -> None:
    """Drop :data:`STARTUP_NOISE` wherever vLLM's records are printed: on the root logger's handlers (which print
    what vLLM logs while it is imported) and, through vLLM's own logging configuration
    (``VLLM_LOGGING_CONFIG_PATH``, unless the user set one), on the handler vLLM installs when an engine starts: its
    default configuration with :class:`StartupNoise` added."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(existing, StartupNoise) for existing in handler.filters):
            handler.addFilter(StartupNoise())
    if os.environ.get("VLLM_LOGGING_CONFIG_PATH"):
        return
    from vllm.logger import DEFAULT_LOGGING_CONFIG

    config = copy.deepcopy(DEFAULT_LOGGING_CONFIG)
    config["filters"] = {"startup_noise": {"()": f"{__name__}.StartupNoise"}}
    config["handlers"]["vllm"]["filters"] = ["startup_noise"]
    handle, path = tempfile.mkstemp(prefix="vllm-logging-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(config, out)
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = path


def in_process_environment(on_gpu: bool) -> None:
    """vLLM's settings for an engine inside this process (unless already set): no engine process, the thread
    settings the process was started with (vLLM's CPU backend would pin its OpenMP threads to every core, "auto";
    every stage keeps OMP_NUM_THREADS on shared machines), and on CPU a KV cache of :data:`CPU_KV_CACHE_GIB`."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    if not on_gpu:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB)


def _keep_cpu_weights() -> None:
    """Make vLLM's CPU backend keep each linear layer's plain weight beside the packed copy it computes with."""
    import vllm.model_executor.layers.utils as layer_utils

    dispatch = layer_utils.dispatch_cpu_unquantized_gemm
    if getattr(dispatch, "keeps_weights", False):
        return

    def keeping(layer, remove_weight):
        dispatch(layer, remove_weight=False)

    keeping.keeps_weights = True
    layer_utils.dispatch_cpu_unquantized_gemm = keeping


def _untruncated_logprobs(worker) -> None:
    """Make the sampler's "processed" log-probs those of the temperature-scaled logits before top-k / top-p.

    The truncating sampler is told to return none of its own (its mode is read only to choose what it returns
    beside the sample), so each step computes one log_softmax over the vocabulary, not two."""
    truncating = worker.model_runner.sampler.topk_topp_sampler
    truncating.logprobs_mode = "raw_logprobs"  # the sampler itself stays in processed mode: it takes ours
    sample = truncating.forward

    def forward(logits, generators, k, p):
        logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)  # before ``sample`` truncates in place
        return sample(logits, generators, k, p)[0], logprobs

    truncating.forward = forward


def _load(worker, weights: List[Tuple[str, torch.Tensor]]) -> None:
    worker.model_runner.model.load_weights(weights=iter(weights))


def _repack(worker) -> None:
    """Recompute every layer's packed CPU weight from its (just loaded) plain weight."""
    for module in worker.model_runner.model.modules():
        method = getattr(module, "quant_method", None)
        if method is not None and hasattr(module, "cpu_linear"):
            method.process_weights_after_loading(module)


def _checksums(worker) -> dict:
    """float64 sum of every parameter of the engine's model (its own, fused names)."""
    return {name: float(param.detach().double().sum()) for name, param in worker.model_runner.model.named_parameters()}


def engine_directory(model: torch.nn.Module, tokenizer) -> str:
    """A directory with what vLLM reads to build the actor's architecture: its config (with ``architectures``),
    the tokenizer, and a generation config whose eos and pad are the tokenizer's."""
    from transformers import GenerationConfig

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    directory = tempfile.mkdtemp(prefix="ma-rlhf-vllm-")
    config = copy.deepcopy(base.config)  # the actor's own config keeps its fields
    config.architectures = [type(base).__name__]
    config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                     bos_token_id=tokenizer.bos_token_id).save_pretrained(directory)
    return directory


class VLLMRolloutEngine(RolloutEngine):
    """A colocated vLLM ``LLM`` (module docstring)."""

    def __init__(self, actor, tokenizer, dtype: str = "fp32", max_model_len: int = 1024,
                 tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.3, world_size: int = 1,
                 logprobs_at_unit_temperature: bool = False, sleep_between_rollouts: bool = True):
        super().__init__(actor)
        self.sleep_between_rollouts = sleep_between_rollouts
        self.on_gpu = torch.cuda.is_available()
        in_process_environment(self.on_gpu)
        filter_startup_noise()
        if not self.on_gpu:
            _keep_cpu_weights()
            logger.warning("vLLM on CPU: no sleep mode; the engine keeps its weights and KV cache between phases")
        from vllm import LLM

        self.pad_token_id, self.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        self.max_model_len = max_model_len
        options = dict(model=engine_directory(actor.module, tokenizer), dtype=VLLM_DTYPES[dtype],
                       load_format="dummy", skip_tokenizer_init=True, max_model_len=max_model_len,
                       logprobs_mode="raw_logprobs" if logprobs_at_unit_temperature else "processed_logprobs",
                       tensor_parallel_size=tensor_parallel_size, seed=0)
        if world_size > 1:
            options["distributed_executor_backend"] = "external_launcher"
        if self.on_gpu:
            options.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=True)
        else:
            options["enforce_eager"] = True
        state = rng_state()  # vLLM seeds every global generator with its own seed while it starts
        try:
            self.llm = LLM(**options)
        finally:
            set_rng_state(state)
        if not logprobs_at_unit_temperature:
            self.llm.collective_rpc(_untruncated_logprobs)
        self.sleeping: set = set()

    def wake(self, *tags: str) -> None:
        """Wake the parts of a sleeping engine (GPU sleep mode) that are asleep among ``tags``."""
        asleep = [tag for tag in tags if tag in self.sleeping]
        if asleep:
            self.llm.wake_up(tags=asleep)
            self.sleeping -= set(asleep)

    def load_weights(self) -> None:
        self.wake("weights")
        for group in exported_weights(self.actor):
            self.llm.collective_rpc(_load, args=(group,))
        if not self.on_gpu:
            self.llm.collective_rpc(_repack)
        self.llm.reset_prefix_cache()  # its cached keys / values were computed by the weights just replaced

    def checksums(self) -> dict:
        """The engine's parameter sums (tests compare them with the actor's)."""
        return self.llm.collective_rpc(_checksums)[0]

    def sampling_params(self, sampling: SamplingConfig, seeds: List[int], want_logprobs: bool) -> list:
        from vllm import SamplingParams

        common = dict(max_tokens=sampling.max_new_tokens, stop_token_ids=[self.eos_token_id], detokenize=False,
                      logprobs=0 if want_logprobs else None)
        if not sampling.do_sample:
            return [SamplingParams(temperature=0.0, **common)] * len(seeds)
        return [SamplingParams(temperature=sampling.temperature, top_k=sampling.top_k or -1, top_p=sampling.top_p,
                               seed=seed, **common) for seed in seeds]

    def sample(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, sampling: SamplingConfig,
               record_entropy: bool) -> Rollout:
        self.wake("weights", "kv_cache")
        rows = [prompt[mask.bool()].tolist() for prompt, mask in zip(prompts.cpu(), prompt_mask.cpu())]
        seeds = torch.randint(0, 2 ** 31 - 1, (len(rows),)).tolist()
        outputs = self.llm.generate([{"prompt_token_ids": row} for row in rows],
                                    self.sampling_params(sampling, seeds, want_logprobs=sampling.do_sample),
                                    use_tqdm=False)
        if self.on_gpu and self.sleep_between_rollouts:  # level 1: weights to host memory, KV cache freed
            self.llm.sleep(level=1)
            self.sleeping = {"weights", "kv_cache"}
        prompt_len, new = prompts.shape[1], sampling.max_new_tokens
        responses = torch.full((len(rows), new), self.pad_token_id, dtype=prompts.dtype)
        logprobs = torch.zeros(len(rows), prompt_len - 1 + new)
        for row, output in enumerate(outputs):
            completion = output.outputs[0]
            tokens = list(completion.token_ids)[:new]
            responses[row, :len(tokens)] = torch.tensor(tokens, dtype=prompts.dtype)
            if completion.logprobs is not None:
                logprobs[row, prompt_len - 1:prompt_len - 1 + len(tokens)] = torch.tensor(
                    [step[token].logprob for step, token in zip(completion.logprobs, tokens)])
        seq = torch.cat([prompts, responses.to(prompts.device)], dim=1)
        return Rollout(seq, engine_logprobs=logprobs.to(prompts.device) if sampling.do_sample else None)
