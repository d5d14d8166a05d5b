"""The peer benchmark's settings check (scripts/benchmarks/peer_settings.py, bench_vs_trl.py) without TRL: the
project's side is resolved by step 3's own parser from the flags the benchmark gives it; TRL's side is a config
built from the keyword arguments the benchmark gives TRL, with the trainer-built state derived from them the way
TRL derives it (bf16 autocast from ``bf16``, whose default is True; recomputation from ``gradient_checkpointing``,
default True). Equal pins must resolve equal; any one difference must be named in one line and stop the run."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "benchmarks"))
import bench_vs_trl  # noqa: E402
import peer_settings  # noqa: E402

from dschat.cli import ppo  # noqa: E402
from dschat.stages.resolve import resolve_algorithm, resolve_batches, resolve_models  # noqa: E402

SPEC = {"actor": "tiny-gemma", "reward": "tiny-gemma", "steps": 2, "warmup": 1, "micro_batch": 16, "epochs": 1,
        "mini_batches": 1, "max_prompt_len": 64, "max_new_tokens": 24, "temperature": 0.8, "top_p": 1.0,
        "beta": 0.05, "gamma": 1.0, "lam": 0.95, "cliprange": 0.2, "cliprange_value": 0.2, "lr": 2e-4,
        "adam_betas": [0.9, 0.95]}
SPECS = {"grpo": dict(SPEC, algo="grpo", prompts=8, num_generations=4, top_k=50, kl_estimator="k3", max_grad_norm=1.0),
         "ppo": dict(SPEC, algo="ppo", prompts=32, num_generations=1, top_k=0, kl_estimator="k1", max_grad_norm=0.0)}
PROMPT_TOKENS = 1234


def project_side(spec: dict) -> dict:
    args = ppo.build_parser().parse_config(bench_vs_trl.project_flags(spec))
    args = resolve_batches(resolve_models(resolve_algorithm(args)), 1)
    state = {"param_dtype": "fp32", "gradient_checkpointing": args.actor_gradient_checkpointing,
             "reference_model": True, "prompt_tokens": PROMPT_TOKENS}
    return peer_settings.project_settings(args, state)


def grpo_config(kwargs: dict) -> SimpleNamespace:
    """A GRPOConfig stand-in resolved as ``GRPOConfig.__post_init__`` resolves it on one process."""
    rows = kwargs["per_device_train_batch_size"] * kwargs["steps_per_generation"]
    return SimpleNamespace(**{"generation_batch_size": rows, **kwargs})


def trl_side(spec: dict, **overrides) -> dict:
    kwargs = {**(bench_vs_trl.trl_grpo_kwargs if spec["algo"] == "grpo" else bench_vs_trl.trl_ppo_kwargs)(spec),
              **overrides}
    state = {"actor": spec["actor"], "reward model": spec["reward"], "critic": spec["reward"],
             "mixed_precision": "bf16" if kwargs.get("bf16", True) else "no", "param_dtype": "fp32",
             "gradient_checkpointing": kwargs.get("gradient_checkpointing", True), "reference_model": True,
             "prompt_limit": spec["max_prompt_len"], "prompt_tokens": PROMPT_TOKENS, "eos_token_id": 1}
    if spec["algo"] == "grpo":
        return peer_settings.trl_grpo_settings(grpo_config(kwargs), state)
    local = kwargs["per_device_train_batch_size"] * kwargs["gradient_accumulation_steps"]  # PPOTrainer.__init__
    config = SimpleNamespace(**{"stop_token_id": None, "local_batch_size": local, **kwargs})
    return peer_settings.trl_ppo_settings(config, state)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_the_benchmark_pins_resolve_equal(algo):
    keys = bench_vs_trl.KEYS[algo]
    project, trl = project_side(SPECS[algo]), trl_side(SPECS[algo])
    assert peer_settings.differences(project, trl, keys) == []
    assert project["compute dtype"] == "fp32" and project["gradient checkpointing"] is False
    assert project["rows per forward/backward"] == 16 and project["optimizer steps per rollout"] == 1
    assert project["prompts per step"] * project["samples per prompt"] == 32


@pytest.mark.parametrize("algo, override, setting", [
    ("grpo", {"bf16": True}, "compute dtype"),
    ("grpo", {"gradient_checkpointing": True}, "gradient checkpointing"),
    ("grpo", {"top_k": 0}, "top-k"),
    ("grpo", {"num_iterations": 2}, "passes over a rollout"),  # and so optimizer steps per rollout
    ("grpo", {"beta": 0.0}, "KL coefficient"),
    ("ppo", {"bf16": True}, "compute dtype"),
    ("ppo", {"gamma": 0.99}, "GAE gamma"),
    ("ppo", {"num_mini_batches": 2}, "mini-batches per pass"),
    ("ppo", {"response_length": 53}, "max new tokens"),
])
def test_a_differing_setting_is_named_and_stops_the_run(algo, override, setting):
    keys = bench_vs_trl.KEYS[algo]
    project, trl = project_side(SPECS[algo]), trl_side(SPECS[algo], **override)
    diffs = peer_settings.differences(project, trl, keys)
    assert diffs[0].startswith(f"{setting}: project ")
    assert len(diffs) == (2 if "num_iterations" in override else 1)
    with pytest.raises(SystemExit) as stop:
        bench_vs_trl.check_settings(project, trl, keys, "before timing")
    assert str(stop.value) == "\n".join(f"error: before timing: setting differs: {line}" for line in diffs)
    assert "   != " in peer_settings.settings_table(project, trl, keys)


def test_trl_defaults_are_what_the_pins_undo():
    """Left to its defaults (bf16 autocast, gradient checkpointing), TRL differs in exactly those two."""
    spec = SPECS["grpo"]
    kwargs = bench_vs_trl.trl_grpo_kwargs(spec)
    del kwargs["bf16"], kwargs["gradient_checkpointing"]
    trl = peer_settings.trl_grpo_settings(grpo_config(kwargs), {
        "actor": spec["actor"], "reward model": spec["reward"], "mixed_precision": "bf16", "param_dtype": "fp32",
        "gradient_checkpointing": True, "reference_model": True, "prompt_limit": 64, "prompt_tokens": PROMPT_TOKENS})
    diffs = peer_settings.differences(project_side(spec), trl, bench_vs_trl.KEYS["grpo"])
    assert [line.split(":")[0] for line in diffs] == ["compute dtype", "gradient checkpointing"]


def test_json_round_trip_compares_equal():
    """Settings travel from the workers as JSON: tuples become lists, 1.0 may come back as 1."""
    assert peer_settings.differences({"Adam betas": (0.9, 0.95), "top-p": 1.0},
                                     {"Adam betas": [0.9, 0.95], "top-p": 1}, ["Adam betas", "top-p"]) == []
    assert peer_settings.differences({"top-p": 0.9}, {"top-p": 1.0}, ["top-p"]) == ["top-p: project 0.9, TRL 1.0"]
