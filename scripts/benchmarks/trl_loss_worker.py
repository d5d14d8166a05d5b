"""Runs in the pinned TRL's own environment (``.bench-venv``, ``trl==1.16.0``; tests/test_trl_parity.py starts it):
TRL's ``GRPOTrainer._compute_loss`` and its vLLM importance-sampling block on given tensors, nothing of this project
imported.

    python scripts/benchmarks/trl_loss_worker.py INPUTS.pt OUTPUTS.pt

INPUTS: ``new``, ``old``, ``engine`` ``[B, T]`` float64 log-probs, ``mask`` ``[B, T]`` (right-padded completions),
``advantages`` ``[B]``, ``max_completion_length``, ``losses``: a list of (loss_type, importance_sampling_level,
epsilon_low, epsilon_high, vllm_importance_sampling_mode or None), ``weights``: a list of
(vllm_importance_sampling_mode, clip_min, clip_max). OUTPUTS: per loss the value and the gradient with respect
to ``new``; per weight setting TRL's importance-sampling ratio.
"""
from __future__ import annotations

import inspect
import math
import sys
import textwrap
from collections import defaultdict
from types import SimpleNamespace

import torch
import trl
from trl import GRPOTrainer


class SingleProcess:
    """What ``_compute_loss`` reads of an accelerator, for one process."""

    num_processes = 1
    sync_gradients = True

    def gather(self, tensor):
        return tensor

    def gather_for_metrics(self, tensor):
        return tensor

    def reduce(self, tensor, reduction="sum"):
        return tensor


def is_block() -> str:
    """TRL's vLLM importance-sampling ratio code, cut from ``_generate_and_score_completions`` as it ships."""
    lines = inspect.getsource(GRPOTrainer._generate_and_score_completions).splitlines()
    start = next(i for i, line in enumerate(lines) if "per_token_logps_diff = (old_per_token_logps" in line)
    end = next(i for i, line in enumerate(lines) if i > start and "log probabilities for the reference" in line)
    return textwrap.dedent("\n".join(lines[start:end]))


def trl_weights(data, mode, clip_min, clip_max):
    trainer = SimpleNamespace(vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=clip_min,
                              vllm_importance_sampling_clip_max=clip_max)
    scope = {"torch": torch, "math": math, "self": trainer, "mask": data["mask"].double(),
             "old_per_token_logps": data["old"], "sampling_per_token_logps": data["engine"]}
    exec(is_block(), scope)  # noqa: S102 - TRL's own lines, read from the installed package
    return scope["vllm_importance_sampling_ratio"]


def trl_loss(data, loss_type, level, eps_low, eps_high, is_mode):
    new = data["new"].clone().requires_grad_(True)
    mask = data["mask"].double()
    is_ratio = None if is_mode is None else trl_weights(data, is_mode, None, 3.0)
    trainer = SimpleNamespace(
        top_entropy_quantile=1.0, aux_loss_enabled=False, off_policy_mask_threshold=None,
        importance_sampling_level=level, beta=0.0, loss_type=loss_type, epsilon_low=eps_low, epsilon_high=eps_high,
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
        use_vllm=is_mode is not None, vllm_importance_sampling_correction=is_mode is not None,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
        max_completion_length=data["max_completion_length"], accelerator=SingleProcess(),
        _entropy_bonus_enabled=False, _metrics=defaultdict(lambda: defaultdict(list)),
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (new, torch.zeros_like(new), None))
    rows, width = mask.shape
    inputs = {"prompt_ids": torch.zeros(rows, 1, dtype=torch.long), "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
              "completion_ids": torch.zeros(rows, width, dtype=torch.long), "completion_mask": mask,
              "advantages": data["advantages"], "old_per_token_logps": data["old"],
              "num_items_in_batch": mask.sum(), "importance_sampling_ratio": is_ratio}
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    loss.backward()
    return loss.detach(), new.grad


def main(source: str, target: str) -> None:
    data = torch.load(source)
    torch.save({"version": trl.__version__,
                "losses": [trl_loss(data, *setting) for setting in data["losses"]],
                "weights": [trl_weights(data, *setting) for setting in data["weights"]]}, target)


if __name__ == "__main__":
    main(*sys.argv[1:])
