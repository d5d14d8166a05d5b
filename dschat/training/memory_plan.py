"""Memory of one training process, by formula: model states (parameters, gradients, optimizer states) under a
ZeRO stage, and activations of a forward/backward, a no-grad forward and a generation. Pure arithmetic on a
:class:`ModelShape`; ``dschat.cli.plan`` applies it to a stage's models and phases.

Model states follow the ZeRO paper's accounting (Rajbhandari et al. 2020, §3: 16-bit parameters and gradients,
fp32 master copy and Adam moments, partitioned over the processes from stage 1/2/3 on) with DeepSpeed's
bookkeeping: its optimizer also keeps an fp32 gradient partition, so ZeRO-2 costs 2Ψ + 18Ψ/N bytes in 16-bit,
exactly DeepSpeed's ``estimate_zero2_model_states_mem_needs``; ZeRO-3 adds one gathered layer (``4 x largest
layer``) as DeepSpeed's ``estimate_zero3_model_states_mem_needs`` does, and costs 2Ψ/N more than it: DeepSpeed
counts 18 bytes per parameter, we count the fp32 gradient of the step (made per sub-group of up to 1e9
parameters, so a whole partition for every model here) like ZeRO-2's. ``tests/test_memory_plan.py`` checks
both against DeepSpeed's functions.

Activations are bytes per token, fitted to what autograd saves in transformers' Gemma / Llama decoder layers
with SDPA attention (no s x s attention matrix is kept), plus the logits at the vocabulary width, which dominate
at Gemma's 256k vocabulary."""
from __future__ import annotations

from dataclasses import dataclass

GIB = 2 ** 30
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
FP32 = 4
ADAM_MOMENTS = 2  # Adam's m and v, fp32 each
SYNC_GROUP_BYTES = 1 << 29
"""Bound of one ZeRO-3 gather while syncing the vLLM engine's weights (512 MiB; ``dschat/rlhf/rollout/weights.py``):
a 2B model in bf16 (5 GB) goes in ~10 groups."""
MASTER_COPY_BYTES = FP32
"""The fp32 master copy DeepSpeed keeps of a trained weight held in bf16 / fp16."""


def checkpoint_bytes(params: int, trainable: int, weight_bytes: int) -> int:
    """Estimated bytes of one engine's checkpoint: its ``params`` weights of ``weight_bytes`` each, and for each of
    its ``trainable`` ones Adam's two fp32 moments (plus an fp32 master copy when the weights are not fp32). The
    run checks the disk for it before its first step, the pre-flight before anything starts."""
    return params * weight_bytes + trainable * (ADAM_MOMENTS * FP32 + (MASTER_COPY_BYTES if weight_bytes != FP32
                                                                      else 0))


@dataclass(frozen=True)
class ModelShape:
    """What the memory of a decoder-only transformer depends on (counted from its config, see
    ``dschat.cli.plan.model_shape``)."""

    params: int
    """Parameters, tied ones once."""
    largest_layer: int
    """Parameters of the largest module (ZeRO-3 gathers one at a time; the embedding for Gemma)."""
    lora_features: int
    """Sum of in + out features over the linear layers LoRA adapts (``all-linear``): rank r adds r x this."""
    head_params: int
    """Parameters of a trained head outside LoRA (the reward model's ``score``; 0 for a causal LM)."""
    hidden: int
    intermediate: int
    layers: int
    q_dim: int
    """Attention heads x head dim."""
    kv_dim: int
    """Key/value heads x head dim."""
    head_dim: int
    vocab: int
    """Width of the output: the vocabulary for a causal LM, 1 for a reward model or critic."""

    def trainable(self, lora_dim: int) -> int:
        """Parameters the optimizer updates: all, or the LoRA adapters (and a score head) at rank ``lora_dim``."""
        return self.params if lora_dim == 0 else lora_dim * self.lora_features + self.head_params


NORMS_PER_LAYER = {"gemma": 2, "gemma2": 4, "llama": 2, "mistral": 2, "qwen2": 2}
"""RMSNorm weights per decoder layer of each model type the plan counts (Gemma 2 norms before and after both the
attention and the MLP)."""
QKV_BIAS = {"qwen2"}
"""Model types whose query, key and value projections carry a bias."""


def decoder_shape(config: dict, head: str = "lm") -> ModelShape:
    """The :class:`ModelShape` of a decoder-only transformer from its ``config.json`` values (``model_type``,
    ``hidden_size``, ...), with a language-model head (``lm``: tied to the embedding unless
    ``tie_word_embeddings`` is false) or a reward/critic ``score`` head (one output, no bias). Counted as
    transformers builds these models: embedding, per layer the q/k/v/o projections, the gated MLP (gate, up,
    down) and the norms, and the final norm. ValueError for a model type it does not know."""
    kind = config.get("model_type")
    if kind not in NORMS_PER_LAYER:
        raise ValueError(f"model_type {kind}: the memory plan counts {', '.join(sorted(NORMS_PER_LAYER))}")
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    q_dim, kv_dim = heads * head_dim, config.get("num_key_value_heads", heads) * head_dim
    projections = [(hidden, q_dim), (hidden, kv_dim), (hidden, kv_dim), (q_dim, hidden),
                   (hidden, inter), (hidden, inter), (inter, hidden)]
    bias = q_dim + 2 * kv_dim if kind in QKV_BIAS else 0
    layer = sum(a * b for a, b in projections) + bias + NORMS_PER_LAYER[kind] * hidden
    embedding = vocab * hidden
    if head == "lm":
        output = 0 if config.get("tie_word_embeddings", True) else vocab * hidden
    else:
        output = hidden
    return ModelShape(
        params=embedding + config["num_hidden_layers"] * layer + hidden + output,
        largest_layer=max(embedding, output, *(a * b for a, b in projections)),
        lora_features=config["num_hidden_layers"] * sum(a + b for a, b in projections),
        head_params=0 if head == "lm" else output, hidden=hidden, intermediate=inter,
        layers=config["num_hidden_layers"], q_dim=q_dim, kv_dim=kv_dim, head_dim=head_dim,
        vocab=vocab if head == "lm" else 1)


@dataclass(frozen=True)
class States:
    """Bytes of one model's states on one process: on the accelerator, and in host memory when offloaded."""

    params: float
    gradients: float
    optimizer: float
    gathered: float = 0.0
    """ZeRO-3's gathered layer: transient, so models that run one after another share it."""
    host: float = 0.0

    @property
    def resident(self) -> float:
        return self.params + self.gradients + self.optimizer

    @property
    def device(self) -> float:
        return self.resident + self.gathered


def model_states(shape: ModelShape, *, dtype: str, zero_stage: int, world_size: int, trained: bool,
                 lora_dim: int = 0, offload: bool = False, offload_params: bool = False) -> States:
    """Parameters, gradients and optimizer states of one process (bytes).

    ``p`` = bytes of the dtype, Ψ = trainable parameters, N = processes. Parameters: p x all (ZeRO-3: /N, plus
    one gathered layer in fp32 width as DeepSpeed's estimator counts it). Gradients: p x Ψ (ZeRO-2/3: /N),
    plus DeepSpeed's fp32 gradient partition 4Ψ (/N from ZeRO-1) whenever it keeps an fp32 master copy — in
    mixed precision, or from ZeRO-1 on (its optimizer clones the partition even in fp32). Optimizer: fp32 master
    4Ψ (same condition) + Adam moments 8Ψ (/N from ZeRO-1); plain fp32 without ZeRO is torch AdamW alone
    (4Ψ + 4Ψ + 8Ψ = 16Ψ). Optimizer offload moves master, moments and fp32 gradients to the host (the
    gradients go there as they are reduced); parameter offload (ZeRO-3) moves the parameters too."""
    p = DTYPE_BYTES[dtype]
    n = world_size
    gathered = FP32 * shape.largest_layer if zero_stage == 3 else 0.0
    params = p * shape.params / n if zero_stage == 3 else p * shape.params
    host = 0.0
    if offload_params:
        host, params = params, 0.0
    if not trained:
        return States(params=params, gradients=0.0, optimizer=0.0, gathered=gathered, host=host)
    psi = shape.trainable(lora_dim)
    master = p < FP32 or zero_stage >= 1
    optimizer_share = psi / n if zero_stage >= 1 else psi
    gradients = p * psi / n if zero_stage >= 2 else p * psi
    fp32_gradients = FP32 * optimizer_share if master else 0.0
    optimizer = (FP32 * optimizer_share if master else 0.0) + ADAM_MOMENTS * FP32 * optimizer_share
    if offload:
        return States(params=params, gradients=0.0, optimizer=0.0, gathered=gathered,
                      host=host + fp32_gradients + optimizer)
    return States(params=params, gradients=gradients + fp32_gradients, optimizer=optimizer, gathered=gathered,
                  host=host)


# ------------------------------------------------------------------------------------------------ activations


def layer_bytes_per_token(shape: ModelShape, dtype: str) -> float:
    """Bytes one decoder layer saves for its backward, per token: q (after RoPE) and the attention output, k and
    v, the MLP's gate, up, activation and product, RoPE's cos/sin, and the layer's h-wide tensors — its two
    residual inputs in the dtype, the RMSNorms' fp32 upcasts (the same tensor when the dtype is fp32). Fitted
    with ``torch.autograd.graph.saved_tensors_hooks`` on transformers' Gemma and Llama (within 3%)."""
    p = DTYPE_BYTES[dtype]
    h_wide = 4 * p + (2 if p == FP32 else 3) * FP32
    return p * (2 * shape.q_dim + 2 * shape.kv_dim + 4 * shape.intermediate + 2 * shape.head_dim) \
        + h_wide * shape.hidden


def logits_bytes_per_token(shape: ModelShape, dtype: str, backward: bool) -> float:
    """The output's bytes per token: the logits in the dtype and their fp32 copy (log-softmax / log-sum-exp
    input), its result, and in the backward the fp32 gradient and its cast back; a reward head's output is one
    value per token (negligible)."""
    p = DTYPE_BYTES[dtype]
    copies = (0 if p == FP32 else p) + FP32 * (3 if backward else 2)
    return copies * shape.vocab


def training_activations(shape: ModelShape, dtype: str, rows: int, seq_len: int, checkpointing: bool) -> float:
    """Activation bytes of one forward + backward of ``rows`` sequences of ``seq_len`` tokens. With gradient
    checkpointing each layer keeps only its input and one layer is recomputed at a time."""
    tokens = rows * seq_len
    per_layer = layer_bytes_per_token(shape, dtype)
    if checkpointing:
        saved = shape.layers * DTYPE_BYTES[dtype] * shape.hidden + per_layer
    else:
        saved = shape.layers * per_layer
    return tokens * (saved + logits_bytes_per_token(shape, dtype, backward=True))


def forward_activations(shape: ModelShape, dtype: str, rows: int, seq_len: int) -> float:
    """Activation bytes of a no-grad forward (scoring, evaluation): one layer's transients and the logits."""
    tokens = rows * seq_len
    return tokens * (layer_bytes_per_token(shape, dtype) + logits_bytes_per_token(shape, dtype, backward=False))


def generation_activations(shape: ModelShape, dtype: str, rows: int, prompt_len: int, new_tokens: int) -> float:
    """Bytes of sampling ``new_tokens`` for ``rows`` prompts: the KV cache at full length (k and v of every
    layer) and the prefill's transients (one layer over the prompts; logits of the last position only)."""
    p = DTYPE_BYTES[dtype]
    kv_cache = rows * (prompt_len + new_tokens) * shape.layers * 2 * shape.kv_dim * p
    prefill = rows * prompt_len * layer_bytes_per_token(shape, dtype)
    return kv_cache + prefill + rows * FP32 * 2 * shape.vocab
