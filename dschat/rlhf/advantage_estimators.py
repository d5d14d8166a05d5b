"""Advantage estimators of step 3, keyed by ``--algo``: PPO / MA-PPO's macro GAE with a critic, and the
critic-free baselines the paper compares against — RLOO (Ahmadian et al., 2024), GRPO (Shao et al., 2024) and
REINFORCE (Williams, 1992) — (paper §3.2.3, Appendix C.3 / Table 7).

The critic-free estimators are MA-PPO's n → ∞ limit (§3.2.3): the whole response is ONE macro action, its
return is the sum of the per-token rewards, a sequence-level baseline replaces the critic, and the sequence
advantage is broadcast to every response token — exactly what ``to_tokens`` does for a one-macro segmentation.
The clipped :func:`~dschat.rlhf.macro_action.policy_loss` is then used unchanged (with ``ppo_epochs = 1`` and
the default token ratio its gradient at the sampling policy is the REINFORCE gradient).

Sequence return (the choice, documented): R(x, y) = Σ_t r_t over response tokens, with r_t the shaped reward
of :func:`dschat.rlhf.kl.token_rewards` = −β·KL_t plus the clipped score at the last token, so
R = clip(r(x, y)) − β·Σ_t KL_t. With the k1 estimator Σ_t KL_t = log π(y|x) − log π_ref(y|x), which is the
RLOO paper's sequence reward r(x, y) − β·log(π/π_ref): the KL is in the reward, for every algorithm alike.

Groups: each prompt of a generation batch is repeated K = ``--num_samples_per_prompt`` times in contiguous
rows, so a batch of B = G·K returns is G groups ``returns.view(G, K)``. A group lies in one process; the batch of
the batch-wide statistics (``--scale_rewards batch``'s std, ``--reinforce_baseline batch_mean``'s mean) is the
union of every data-parallel process's rows (:func:`batch_mean_std`), as TRL's ``GRPOTrainer`` gathers every
process's rewards before its batch std.

The trainer calls ``build_advantage_estimator(config)`` once and never branches on algorithm names: an
estimator maps ``(values, rewards, segment_ids, action_mask)`` to token advantages, token returns and
statistics; the registry entry of ``--algo`` (:data:`ALGORITHMS`) says whether a critic is built at all.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

from dschat.core.distributed import all_reduce_sum
from dschat.rlhf.algorithms import ALGORITHMS, REINFORCE_BASELINES, SCALE_REWARDS, get_algorithm
from dschat.rlhf.macro_action import compute_macro_advantages, macro_statistics, masked_mean
from dschat.rlhf.macro_action.segments import as_action_mask, check_same_shape

SequenceAdvantageFn = Callable[[torch.Tensor, int], torch.Tensor]
EstimatorOutput = Tuple[torch.Tensor, torch.Tensor, Dict[str, torch.Tensor]]
ReduceSum = Callable[[torch.Tensor], torch.Tensor]
"""Sums a tensor over the processes whose rows make up the batch (:func:`dschat.core.distributed.all_reduce_sum`);
``None`` where one is asked for: this process holds the whole batch."""


def sequence_returns(rewards: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """R(x, y) = Σ_t r_t over each row's response tokens, ``[B]`` (γ = 1: the response is a single step)."""
    on = as_action_mask(action_mask)
    check_same_shape("rewards", rewards, on, "action_mask")
    return torch.where(on, rewards, torch.zeros((), dtype=rewards.dtype, device=rewards.device)).sum(dim=1)


def grouped(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[B]`` returns as ``[B / K, K]``: row g holds the K samples of prompt g (contiguous rows)."""
    if returns.dim() != 1:
        raise ValueError(f"returns must be 1-D [B], got shape {tuple(returns.shape)}")
    if group_size < 1 or returns.shape[0] % group_size:
        raise ValueError(f"group_size must be >= 1 and divide the batch of {returns.shape[0]} returns, "
                         f"got {group_size}")
    return returns.view(-1, group_size)


def rloo_advantages(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO: A_i = R_i − (1 / (K − 1))·Σ_{j≠i} R_j, the leave-one-out mean of the other K − 1 samples of the
    same prompt as baseline (Ahmadian et al., 2024). Needs K ≥ 2. ``[B]``."""
    if group_size < 2:
        raise ValueError(f"RLOO needs group_size >= 2 samples per prompt, got {group_size}")
    groups = grouped(returns, group_size)
    leave_one_out_mean = (groups.sum(dim=1, keepdim=True) - groups) / (group_size - 1)
    return (groups - leave_one_out_mean).reshape(-1)


GRPO_STD_EPS = 1e-4
"""Added to the group std before dividing (TRL's GRPOTrainer: ``(r - mean) / (std + 1e-4)``): a group whose
returns differ only by rounding noise gets advantages of that noise's scale, not unit-scale ones."""


def grpo_advantages(returns: torch.Tensor, group_size: int, scale: str = "group") -> torch.Tensor:
    """GRPO outcome supervision: A_i = (R_i − mean(R)) / (std(R) + :data:`GRPO_STD_EPS`) within each group of K
    (Shao et al., 2024), with the unbiased std (as their reference implementation and TRL); ``scale`` is
    :func:`scale_advantages`'s (``none``: Dr. GRPO's R_i − mean(R)). A group whose K returns are all equal carries
    no preference signal: its advantages are exactly 0 (even when the float mean is off by an ulp). Needs K ≥ 2.
    ``[B]``."""
    if group_size < 2:
        raise ValueError(f"GRPO needs group_size >= 2 samples per prompt, got {group_size}")
    groups = grouped(returns, group_size)
    constant = (groups == groups[:, :1]).all(dim=1, keepdim=True)
    centered = groups - groups.mean(dim=1, keepdim=True)
    centered = torch.where(constant, torch.zeros_like(centered), centered).reshape(-1)
    return scale_advantages(centered, returns, group_size, scale)


def batch_mean_std(returns: torch.Tensor, reduce_sum: Optional[ReduceSum] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std of the batch's returns, the batch being the union of every process's ``returns``
    (``reduce_sum``: :data:`ReduceSum`), as TRL's ``GRPOTrainer._generate_and_score_completions`` gathers every
    process's rewards before its batch std. Sums only, in two passes (N and Σ R, then Σ (R − mean)²), so the
    processes may hold different numbers of rows."""
    total = reduce_sum or (lambda value: value)
    count, summed = total(torch.stack([returns.new_tensor(float(returns.numel())), returns.sum()]))
    mean = summed / count
    return mean, (total((returns - mean).square().sum()) / (count - 1)).sqrt()


def scale_advantages(advantages: torch.Tensor, returns: torch.Tensor, group_size: int, scale: str,
                     reduce_sum: Optional[ReduceSum] = None) -> torch.Tensor:
    """``--scale_rewards``: A_i / (std + :data:`GRPO_STD_EPS`) with the unbiased std of the returns of A_i's group
    (``group``: GRPO, Shao et al. 2024, as their reference implementation and TRL) or of the whole batch over all
    processes (``batch``: TRL's, Liu et al. 2025's suggestion for a less biased GRPO; :func:`batch_mean_std`), or
    A_i unchanged (``none``: Dr. GRPO, Liu et al. 2025 §3.1). ``[B]``."""
    if scale not in SCALE_REWARDS:
        raise ValueError(f"--scale_rewards {scale!r}: expected one of {SCALE_REWARDS}")
    if scale == "none":
        return advantages
    if scale == "batch":
        return advantages / (batch_mean_std(returns, reduce_sum)[1] + GRPO_STD_EPS)
    groups = grouped(advantages, group_size)
    return (groups / (grouped(returns, group_size).std(dim=1, keepdim=True) + GRPO_STD_EPS)).reshape(-1)


def reinforce_advantages(returns: torch.Tensor, group_size: int, batch_mean_baseline: bool = False,
                         reduce_sum: Optional[ReduceSum] = None) -> torch.Tensor:
    """REINFORCE (Williams, 1992): A_i = R_i, RLOO without its baseline; with ``batch_mean_baseline`` the mean
    return of the whole batch over all processes (:func:`batch_mean_std`) is subtracted instead. ``group_size``
    only checks the layout. ``[B]``."""
    grouped(returns, group_size)
    return returns - batch_mean_std(returns, reduce_sum)[0] if batch_mean_baseline else returns.clone()


def broadcast_to_tokens(sequence_values: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """A per-sequence value ``[B]`` on every response token of its row, 0 elsewhere, ``[B, T]``: the
    one-macro-per-response broadcast of MA-PPO with n → ∞ (§3.2.3)."""
    on = as_action_mask(action_mask)
    if sequence_values.shape != on.shape[:1]:
        raise ValueError(f"sequence_values must be [B={on.shape[0]}], got {tuple(sequence_values.shape)}")
    return torch.where(on, sequence_values.unsqueeze(1), torch.zeros((), dtype=sequence_values.dtype,
                                                                       device=sequence_values.device))


def group_statistics(returns: torch.Tensor, group_size: int) -> Dict[str, torch.Tensor]:
    """Detached: ``return_std_in_group`` (mean over groups of the population std of their returns) and
    ``constant_groups`` (fraction of groups whose returns are all equal: no signal for RLOO / GRPO)."""
    groups = grouped(returns.detach().float(), group_size)
    return {"return_std_in_group": groups.std(dim=1, correction=0).mean(),
            "constant_groups": (groups == groups[:, :1]).all(dim=1).float().mean()}


@dataclass(frozen=True)
class MacroGAEEstimator:
    """PPO / MA-PPO (§3.2.2): the critic's values σ-pooled per macro, GAE over macro steps, broadcast back."""

    sigma: str
    reward_agg: str
    gamma: float
    lam: float

    def __call__(self, values: torch.Tensor, rewards: torch.Tensor, segment_ids: torch.Tensor,
                 action_mask: torch.Tensor) -> EstimatorOutput:
        advantages, returns, stats = compute_macro_advantages(
            values, rewards, segment_ids, action_mask, sigma=self.sigma, reward_agg=self.reward_agg,
            gamma=self.gamma, lam=self.lam)
        return advantages, returns, {"ppo/values_mean": masked_mean(values, action_mask),
                                     **{f"macro/{key}": value for key, value in stats.items()}}

    def rows_independent(self, rows: int) -> bool:
        """Whether the advantages of any ``rows`` contiguous rows depend on those rows only: always (GAE runs
        along each response)."""
        return True


@dataclass(frozen=True)
class SequenceBaselineEstimator:
    """Critic-free (n → ∞, §3.2.3): sequence returns, a group baseline ``advantage_fn(returns, K)``, the
    sequence advantage and return broadcast to every response token. ``values`` is not read."""

    advantage_fn: SequenceAdvantageFn
    group_size: int
    batch_wide: bool = False
    """The baseline reads the whole batch (REINFORCE's batch mean), not just the group."""
    scale: str = "none"
    """``--scale_rewards`` (:func:`scale_advantages`)."""
    reduce_sum: Optional[ReduceSum] = all_reduce_sum
    """The batch-wide scale's sum over the processes (:func:`batch_mean_std`)."""

    def rows_independent(self, rows: int) -> bool:
        """Whether the advantages of any ``rows`` contiguous rows (starting at a multiple of ``rows``) depend on
        those rows only: when they hold whole groups of K and neither the baseline nor the scale is batch-wide."""
        return not self.batch_wide and self.scale != "batch" and rows % self.group_size == 0

    @torch.no_grad()
    def __call__(self, values: Optional[torch.Tensor], rewards: torch.Tensor, segment_ids: torch.Tensor,
                 action_mask: torch.Tensor) -> EstimatorOutput:
        returns = sequence_returns(rewards, action_mask).float()
        sequence_advantages = scale_advantages(self.advantage_fn(returns, self.group_size), returns, self.group_size,
                                               self.scale, self.reduce_sum)
        advantages = broadcast_to_tokens(sequence_advantages, action_mask)
        token_returns = broadcast_to_tokens(returns, action_mask)
        stats = {f"macro/{key}": value
                 for key, value in macro_statistics(segment_ids, advantages, token_returns, action_mask).items()}
        stats.update({f"baseline/{key}": value for key, value in group_statistics(returns, self.group_size).items()})
        return advantages, token_returns, stats


def _macro_gae(config) -> MacroGAEEstimator:
    return MacroGAEEstimator(config.sigma, config.reward_agg, config.gamma, config.lam)


def reward_scale(config) -> str:
    """``config.scale_rewards`` with ``auto`` replaced by ``--algo``'s own (group for grpo, none otherwise)."""
    scale = getattr(config, "scale_rewards", "auto")
    return get_algorithm(config.algo).scale_rewards if scale == "auto" else scale


def _sequence_baseline(advantage_fn: SequenceAdvantageFn, config) -> SequenceBaselineEstimator:
    """Built when the trainer asks (bound to its advantage function with ``functools.partial``), not at import:
    what runs at import is out of reach of a mutation test's per-test switch."""
    return SequenceBaselineEstimator(advantage_fn, config.num_samples_per_prompt, scale=reward_scale(config))


def _reinforce(config) -> SequenceBaselineEstimator:
    if config.reinforce_baseline not in REINFORCE_BASELINES:
        raise ValueError(f"--reinforce_baseline {config.reinforce_baseline!r}: expected one of {REINFORCE_BASELINES}")
    with_baseline = config.reinforce_baseline == "batch_mean"
    advantage_fn = functools.partial(reinforce_advantages, batch_mean_baseline=with_baseline,
                                     reduce_sum=all_reduce_sum)
    return SequenceBaselineEstimator(advantage_fn, config.num_samples_per_prompt, batch_wide=with_baseline,
                                     scale=reward_scale(config))


ESTIMATORS: Dict[str, Callable[[object], object]] = {
    "ppo": _macro_gae, "rloo": functools.partial(_sequence_baseline, rloo_advantages),
    "grpo": functools.partial(_sequence_baseline, functools.partial(grpo_advantages, scale="none")),
    "reinforce": _reinforce}
"""The estimator builder of each ``--algo`` (:data:`dschat.rlhf.algorithms.ALGORITHMS`)."""
if set(ESTIMATORS) != set(ALGORITHMS):
    raise ImportError(f"estimators {sorted(ESTIMATORS)} do not match the algorithms {sorted(ALGORITHMS)}")


def build_advantage_estimator(config):
    """The estimator of ``config.algo``, configured by ``config`` (step 3's PPO flags,
    ``dschat.stages.configs.PPOConfig``)."""
    return ESTIMATORS[get_algorithm(config.algo).name](config)
