"""The batch-wide statistics of the critic-free estimators are over every data-parallel process's rows (as TRL's
GRPOTrainer gathers the rewards of every process before its batch std): two gloo processes on CPU, each holding
half of a batch, compute the advantages of one process holding the whole batch."""
from __future__ import annotations

import pytest
import torch

HALVES = (torch.tensor([1.0, 3.0, 0.0, 2.0]), torch.tensor([10.0, 4.0, 7.0, 13.0]))
"""Two groups of K = 2 per process; the halves' means (1.5, 8.5) and stds (1.29, 3.87) differ from the batch's."""
K = 2
CONFIGS = {"grpo_batch_std": dict(algo="grpo", num_samples_per_prompt=K, scale_rewards="batch"),
           "reinforce_batch_mean": dict(algo="reinforce", num_samples_per_prompt=K, reinforce_baseline="batch_mean")}


def grpo_batch_std(returns: torch.Tensor) -> torch.Tensor:
    """(R − group mean) / (unbiased std of ``returns`` + 1e-4), by hand."""
    groups = returns.view(-1, K)
    return (groups - groups.mean(dim=1, keepdim=True)).reshape(-1) / (returns.std(unbiased=True) + 1e-4)


def reinforce_batch_mean(returns: torch.Tensor) -> torch.Tensor:
    return returns - returns.mean()


BY_HAND = {"grpo_batch_std": grpo_batch_std, "reinforce_batch_mean": reinforce_batch_mean}


def estimate_on_half(rank: int, store: str, out: str) -> None:
    """One process of two: the estimators step 3 builds from the flags, on this process's half of the batch."""
    import torch.distributed as dist

    from dschat.rlhf.advantage_estimators import build_advantage_estimator
    from dschat.stages.configs import PPOConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    returns = HALVES[rank]
    rows = returns.shape[0]
    results = {}
    for name, flags in CONFIGS.items():
        estimator = build_advantage_estimator(PPOConfig(**flags))
        advantages = estimator(None, returns.unsqueeze(1), torch.zeros(rows, 1, dtype=torch.long),
                               torch.ones(rows, 1, dtype=torch.bool))[0]
        results[name] = advantages.squeeze(1)
    torch.save(results, f"{out}/{rank}.pt")
    dist.destroy_process_group()


def test_batch_std_and_batch_mean_are_over_every_process(tmp_path):
    # spawned, not forked: a test before this one may have left a process group in this process (a run in-process)
    torch.multiprocessing.spawn(estimate_on_half, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2)
    whole = torch.cat(HALVES).double()
    for name, by_hand in BY_HAND.items():
        expected = by_hand(whole).split(len(HALVES[0]))
        for rank, half in enumerate(HALVES):
            got = torch.load(tmp_path / f"{rank}.pt")[name].double()
            assert got.tolist() == pytest.approx(expected[rank].tolist(), rel=1e-5), (name, rank)
            per_process = by_hand(half.double())
            assert (got - per_process).abs().max() > 0.1, (name, rank)  # the halves alone would give other numbers
