"""Parity with a peer (issue 49, opt-in: ``bash scripts/test.sh -m trl``): on identical log-probs, old log-probs,
advantages and ragged masks, the project's policy loss (value and gradient) equals TRL's ``GRPOTrainer`` loss for
each ``loss_type`` that has a counterpart here, at ``importance_sampling_level`` token and sequence, to 1e-6; and the
rollout correction's truncated and masked weights equal TRL's ``vllm_importance_sampling_mode`` modes.

TRL runs in its own environment, pinned as ``scripts/benchmarks/bench_vs_trl.py`` pins it (``.bench-venv``: CPU
``torch==2.13.0``, then ``trl==1.16.0``; created on first use), through ``scripts/benchmarks/trl_loss_worker.py``,
which calls TRL's own ``_compute_loss`` and cuts its importance-sampling lines from the installed package. The
combinations without a counterpart are listed in docs/objective.md."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from dschat.rlhf.macro_action import importance_weights, policy_loss

pytestmark = pytest.mark.trl

sys.path.insert(0, os.path.join(ROOT, "scripts", "benchmarks"))
from bench_vs_trl import TRL, ensure_venv  # noqa: E402

LOSS_TYPES = {"grpo": "seq_mean_token_mean", "bnpo": "token_mean", "dapo": "token_mean",
              "dr_grpo": "seq_mean_token_sum_norm", "luspo": "seq_mean_token_sum"}
"""TRL ``loss_type`` -> ``--loss_agg`` (one process, one accumulation step: ``dapo``'s ``num_items_in_batch`` is the
batch's tokens, so it is ``bnpo``)."""
LEVELS = {"token": "token", "sequence": "sequence_geo"}
"""TRL ``importance_sampling_level`` -> ``--ratio``."""
EPS_LOW, EPS_HIGH, MAX_LEN = 0.2, 0.28, 12
LENGTHS = (9, 1, 5, 7, 3, 9)
LOSSES = [(loss_type, level, EPS_LOW, EPS_HIGH, None) for loss_type in LOSS_TYPES for level in LEVELS] + \
         [("grpo", "token", EPS_LOW, EPS_HIGH, "token_truncate"), ("bnpo", "sequence", EPS_LOW, EPS_HIGH,
                                                                    "sequence_mask")]
WEIGHTS = [(f"{level}_{mode}", low, cap) for level in ("token", "sequence") for mode in ("truncate", "mask")
           for low, cap in ((None, 3.0), (0.5, 1.5))]


def inputs():
    g = torch.Generator().manual_seed(49)
    width = max(LENGTHS)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in LENGTHS], dtype=torch.long)
    old = torch.randn(mask.shape, generator=g, dtype=torch.float64) - 2
    new = old + 0.3 * torch.randn(mask.shape, generator=g, dtype=torch.float64)
    engine = old + 0.25 * torch.randn(mask.shape, generator=g, dtype=torch.float64)
    return {"new": new, "old": old, "engine": engine, "mask": mask, "max_completion_length": MAX_LEN,
            "advantages": torch.randn(len(LENGTHS), generator=g, dtype=torch.float64),
            "losses": LOSSES, "weights": WEIGHTS}


@pytest.fixture(scope="module")
def trl_results(tmp_path_factory):
    """TRL's numbers on :func:`inputs`, from the pinned TRL in its own environment."""
    requirement, venv = TRL["grpo"]
    python = ensure_venv(os.path.join(ROOT, venv), requirement)
    folder = tmp_path_factory.mktemp("trl")
    data = inputs()
    torch.save(data, folder / "in.pt")
    subprocess.run([python, os.path.join(ROOT, "scripts", "benchmarks", "trl_loss_worker.py"), str(folder / "in.pt"),
                    str(folder / "out.pt")], check=True, env={"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1"})
    return data, torch.load(folder / "out.pt")


def ours(data, weights_mode=None):
    mask = data["mask"].bool()
    weights = None
    if weights_mode is not None:
        level, mode = weights_mode.split("_")
        weights = importance_weights(data["old"], data["engine"], mask, level, 3.0, mode=mode)
    return mask, weights


@pytest.mark.parametrize("index", range(len(LOSSES)), ids=[f"{s[0]}-{s[1]}-{s[4]}" for s in LOSSES])
def test_policy_loss_equals_trls(trl_results, index):
    data, trl = trl_results
    assert trl["version"] == TRL["grpo"][0].split("==")[1]
    loss_type, level, eps_low, eps_high, is_mode = LOSSES[index]
    mask, weights = ours(data, is_mode)
    advantages = torch.where(mask, data["advantages"].unsqueeze(1).expand(mask.shape), torch.zeros(()))
    new = data["new"].clone().requires_grad_(True)
    loss, _ = policy_loss(new, data["old"], advantages, mask, eps_low, ratio=LEVELS[level], weights=weights,
                          clip_eps_high=eps_high, loss_agg=LOSS_TYPES[loss_type], norm_length=MAX_LEN)
    loss.backward()
    trl_loss, trl_grad = trl["losses"][index]
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    torch.testing.assert_close(new.grad * mask, trl_grad * mask, atol=1e-6, rtol=0)


@pytest.mark.parametrize("index", range(len(WEIGHTS)), ids=[f"{s[0]}-{s[1]}-{s[2]}" for s in WEIGHTS])
def test_correction_weights_equal_trls(trl_results, index):
    data, trl = trl_results
    mode, low, cap = WEIGHTS[index]
    level, kind = mode.split("_")
    mask = data["mask"].bool()
    got = importance_weights(data["old"], data["engine"], mask, level, cap, mode=kind, low=low or 0.0)
    expected = trl["weights"][index].expand(mask.shape)
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-6, rtol=0)
    if kind == "mask" and low is not None:  # the narrow bounds [0.5, 1.5]
        assert (expected[mask] == 0).any() and (expected[mask] > 0).any()  # some units masked, some kept
