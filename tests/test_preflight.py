"""The pre-flight's lines beyond the cross-flag rules (tests/test_resolve.py): a CPU run without DS_ACCELERATOR,
checkpoint folders without weights, the disk, and a launcher's --dry_run that stops after the pre-flight."""
import os
import subprocess
import sys
from collections import namedtuple

import pytest

from conftest import ROOT
from dschat.cli import plan, preflight
from dschat.training.memory_plan import checkpoint_bytes

NO_GPU = {key: value for key, value in os.environ.items()
          if key not in ("DS_ACCELERATOR", "WORLD_SIZE", "RANK", "CUDA_VISIBLE_DEVICES")}


def test_a_plain_python_run_without_gpus_preflights_on_the_cpu_and_a_launch_does_not(monkeypatch):
    """The README's CPU commands are plain ``python``: the run starts on the CPU (init_distributed), so the
    pre-flight says so; a launcher's processes ($WORLD_SIZE set) asked for GPUs."""
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert preflight.gpu_check([], 1).ok
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not preflight.gpu_check([], 1).ok


def test_readme_cpu_command_preflights_clean_without_ds_accelerator(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "training/step1_supervised_finetuning/main.py"),
                             "--output_dir", str(tmp_path / "sft"), "--dry_run"], capture_output=True, text=True,
                            cwd=ROOT, env={**NO_GPU, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok      GPUs: none visible; one CPU process" in result.stdout
    assert "MISSING" not in result.stdout and not (tmp_path / "sft").exists()


def test_a_folder_with_only_config_json_is_not_a_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    check = preflight.local_model_check("--model_name_or_path", str(tmp_path))
    assert not check.ok and "a folder without weights" in check.line
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert preflight.local_model_check("--model_name_or_path", str(tmp_path)).ok


def test_disk_line_needs_one_checkpoint_of_the_trained_models(tmp_path, monkeypatch):
    """tiny-gemma trained in fp32: 4 bytes a weight + Adam's two fp32 moments = 12 per parameter; bf16: 2 + 8 + the
    fp32 master copy 4 = 14. The frozen models (step 3's reference and reward model) are not checkpointed."""
    sft = plan.make_plan(None, 1, stage="sft", model="tiny-gemma")
    params = sft.roles[0].shape.params
    assert sft.roles[0].checkpoint == 12 * params
    assert plan.make_plan(None, 1, stage="sft", model="tiny-gemma", overrides=("--dtype", "bf16")
                          ).roles[0].checkpoint == 14 * params
    ppo = plan.make_plan(None, 1, stage="ppo", model="tiny-gemma")
    assert [role.checkpoint > 0 for role in ppo.roles] == [True, False, True, False]
    assert checkpoint_bytes(10, 0, 2) == 20
    needed = sum(role.checkpoint for role in ppo.roles)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda path: usage(0, 0, needed - 1))
    check = preflight.disk_check(str(tmp_path / "new" / "run"), ppo)
    assert not check.ok and f"at {tmp_path}," in check.line and "the actor, critic needs" in check.line
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda path: usage(0, 0, needed))
    assert preflight.disk_check(str(tmp_path), ppo).ok


@pytest.mark.parametrize("skip", ["1", "0"])
def test_a_launchers_dry_run_is_the_preflight_alone(tmp_path, skip):
    """``--dry_run`` to a launcher (with PREFLIGHT=0 too): the report once, exit 0, no deepspeed, no folder, no
    training.log."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "deepspeed").write_text('#!/usr/bin/env bash\ntouch "$CAPTURE"\n')
    (fake / "deepspeed").chmod(0o755)
    env = {**NO_GPU, "PATH": f"{fake}:{os.environ['PATH']}", "CAPTURE": str(tmp_path / "started"),
           "NUM_GPUS": "1", "DS_ACCELERATOR": "cpu", "OUTPUT_ROOT": str(tmp_path / "outputs"), "PYTHON": sys.executable,
           "PYTHONPATH": ROOT, "MODEL_PATH": "tiny-gemma", "PREFLIGHT": "1" if skip == "1" else "0"}
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts/step1_sft/gemma-2b_tldr.sh"), "--data_name",
                             "synthetic", "--dry_run"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("pre-flight of sft:") == 1
    assert not (tmp_path / "started").exists() and not (tmp_path / "outputs").exists()


def test_a_gated_model_without_a_token_says_whether_the_hub_can_be_reached(monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *args, **kwargs: None)
    for unreachable, said in ((None, "the hub can be reached"),
                              ("HF_HUB_OFFLINE is set", "the hub cannot be reached (HF_HUB_OFFLINE is set)")):
        monkeypatch.setattr(preflight, "hub_unreachable", lambda: unreachable)
        check = preflight.model_check("--model_name_or_path", "google/gemma-2b", {})
        assert not check.ok and "a gated model: accept its licence" in check.line and check.line.endswith(said)


def test_memory_line_judges_the_plan_on_the_visible_gpu(monkeypatch):
    """With a GPU in use: the plan's peak plus the reserve against the first GPU's memory (stand-in properties)."""
    import types

    import torch

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    made = plan.make_plan(None, 1, stage="sft", model="gemma-2b")
    for total_gib, ok in ((80, True), (20, False)):
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda index: types.SimpleNamespace(total_memory=total_gib * 2 ** 30))
        check = preflight.memory_check(made, 1, ["Fake GPU"])
        assert check.ok is ok and (made.peak + 3 * 2 ** 30 <= total_gib * 2 ** 30) is ok  # 71.8 GiB peak
        assert f"of {total_gib:.1f} GiB per GPU on 1 GPU(s), host 0.00 of " in check.line
        assert check.line.endswith("fits" if ok else "does NOT fit (GPU memory) (python -m dschat.cli.plan shows the "
                                   "terms)")


def test_memory_line_judges_host_memory_on_this_node_as_the_plan_does(monkeypatch):
    """Gemma-2 27B PPO offloads its optimizer states (101.43 GiB per process): 8 processes on a node of 500 GiB do
    not fit; the verdict is the plan's own (``plan.judge``) with this machine as the node."""
    import types

    import torch

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(total_memory=80 * 2 ** 30))
    made = plan.make_plan(os.path.join(ROOT, "configs/ppo/gemma2-27b/tldr.yaml"), 8)
    per_node = 8 * sum(role.states.host for role in made.roles) + 8 * made.host_extra
    for host_gib, verdict in ((500, "does NOT fit (host memory)"), (2000, "fits")):
        monkeypatch.setattr(plan, "detected_host_gib", lambda: host_gib)
        check = preflight.memory_check(made, 8, ["Fake GPU"])
        assert f"host {per_node / 2 ** 30:.2f} of {host_gib:.1f} GiB: {verdict}" in check.line
        assert check.ok is (verdict == "fits") and (per_node <= host_gib * 2 ** 30) is check.ok
        assert plan.judge(made, 80, 3, plan.Host(host_gib, 8)) == verdict


def test_async_rollouts_with_a_gpu_are_refused_in_the_runs_words():
    """The producer runs on CPU only: with GPUs visible the engine line is MISSING, with the stage's own message."""
    from dschat.cli.ppo import build_parser
    from dschat.stages.configs import ASYNC_ON_GPU

    args = build_parser().parse_config(["--data_name", "synthetic", "--output_dir", "x", "--actor_model_name_or_path",
                                        "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
                                        "--async_rollout", "1"])
    on_gpu = preflight.engine_check("ppo", args, ["Fake GPU"])
    assert on_gpu.missing and on_gpu.line == f"engine: --async_rollout 1: {ASYNC_ON_GPU}"
    on_cpu = preflight.engine_check("ppo", args, [])
    assert on_cpu.ok and on_cpu.line == "engine: --rollout_engine hf, producer 1 iteration(s) ahead"
