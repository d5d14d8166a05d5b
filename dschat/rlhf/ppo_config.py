"""Every PPO / MA-PPO constant and the rollouts' sampling, with the paper's Table 5 defaults (Gemma-2B column). Each
field is also a flag of step 3 (``dschat/cli/ppo.py``; the segmentation viewer takes ``--temperature``): its type
says how the value is checked and its docstring is the ``--help``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Optional

from dschat.rlhf.algorithms import ALGORITHMS, REINFORCE_BASELINES
from dschat.rlhf.macro_action.choices import REWARD_AGGS, ROLLOUT_IS_LEVELS, SIGMAS
from dschat.utils.config import (Alias, Fraction, NonNegativeFloat, NonNegativeInt, OneOf, PositiveFloat, PositiveInt,
                                 Range)


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
    whiten_advantages: bool = False
    """Normalise advantages over the batch's response tokens (off in the paper's setup)."""
    sigma: Annotated[Literal[SIGMAS], Alias("--value_function")] = "equal"
    """σ of the macro value (Appendix D.1): equal | unit | position."""
    reward_agg: Annotated[Literal[REWARD_AGGS], Alias("--macro_reward")] = "sum"
    """Macro reward R_τ: sum (the paper's, ρ = 1) | mean (the released code)."""
    ratio: Annotated[Literal["token", "macro"], Alias("--ma_ratio")] = "token"
    """Importance ratio: token (each token's ratio with its macro's advantage) | macro (π(ω|s)/π_old(ω|s))."""
    algo: Annotated[str, OneOf(_algorithms)] = "ppo"
    """Advantage estimator (``dschat.rlhf.baselines``): ppo (critic + macro GAE) | rloo | grpo | reinforce
    (critic-free, one macro per response: the n → ∞ limit of §3.2.3; Appendix C.3)."""
    num_samples_per_prompt: Optional[PositiveInt] = None
    """K: each prompt of a generation batch is sampled K times, in contiguous rows (default: 4 for rloo and grpo,
    1 otherwise; App. C.3)."""
    reinforce_baseline: Annotated[str, OneOf(_reinforce_baselines)] = "none"
    """--algo reinforce only: none (raw sequence return) | batch_mean (subtract the batch's mean return)."""
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


def reward_zero_stage(args) -> int:
    """The frozen reward model's ZeRO stage: ``--reward_zero_stage``, by default the critic's (``args``: step 3's
    flags; the run, the memory plan and the resolver read it here)."""
    return args.critic_zero_stage if args.reward_zero_stage is None else args.reward_zero_stage
