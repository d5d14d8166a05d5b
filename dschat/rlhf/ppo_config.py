"""Every PPO / MA-PPO constant, with the paper's Table 5 defaults (Gemma-2B column)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class PPOConfig:
    kl_coef: float = 0.05
    """β: weight of the per-token KL penalty -β·KL(π‖π_ref) in the reward (Table 5)."""
    kl_estimator: str = "k1"
    """KL estimator per token: k1 = log π - log π_ref, k2 = ½(·)², k3 = (ratio - 1) - log ratio (Schulman)."""
    reward_clip: float = 5.0
    """The reward-model score is clipped to [-c, c] before it is added at the last response token."""
    clip_ratio: float = 0.2
    """ε of the clipped surrogate objective (§3.2.2)."""
    value_clip: float = 0.2
    """Clip range of the critic's value update around the rollout values."""
    gamma: float = 1.0
    """γ of GAE over macro steps (Table 5)."""
    lam: float = 0.95
    """λ of GAE over macro steps (Table 5)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (Table 5: 1)."""
    whiten_advantages: bool = False
    """Normalise advantages over the batch's response tokens (off in the paper's setup)."""
    sigma: str = "equal"
    """Macro value σ (Appendix D.1): equal | unit | position."""
    macro_reward: str = "sum"
    """Macro reward: sum (the paper's R_τ with ρ = 1) | mean (the released code)."""
    ma_ratio: str = "token"
    """Importance ratio: token (each token's ratio with its macro's advantage) | macro (π(ω|s)/π_old(ω|s))."""
    termination: str = "fixed"
    """Termination rule ζ (§3.2.1); with ``ngram`` = 1 MA-PPO is token-level PPO."""
    ngram: Optional[int] = 1
    """Fixed n-gram length; None = the whole response is one macro (n → ∞)."""
    algo: str = "ppo"
    """Advantage estimator (``dschat.rlhf.baselines``): ppo (critic + macro GAE) | rloo | grpo | reinforce
    (critic-free, one macro per response: the n → ∞ limit of §3.2.3; Appendix C.3)."""
    num_samples_per_prompt: int = 1
    """K: each prompt of a generation batch is sampled K times, in contiguous rows (RLOO: K = 4, App. C.3)."""
    reinforce_baseline: str = "none"
    """REINFORCE only: none (raw sequence return) | batch_mean (subtract the batch's mean return)."""
    nonfinite_rewards: str = "drop"
    """A NaN or ±inf score (a broken reward model or reward function): drop (the sample gets no loss weight —
    its response mask is cleared — and is counted in ``reward/nonfinite``) | stop (end the run, one line)."""
