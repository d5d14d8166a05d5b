"""Every launcher under scripts/step*/ at the scale it is written for: expanded at 1, 8 and 16 processes with a
fake ``deepspeed`` on PATH that records its argv; each command is parsed by its stage's own parser and config
checks, and the batch sizes derived for that process count must make the config's global batch."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from dschat.core.config import ConfigError

from conftest import ROOT
from dschat.cli import stage_parser

LAUNCHERS = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "scripts", "step*", "*.sh")))
MAINS = {"training/step1_supervised_finetuning/main.py": "sft", "training/step2_reward_model_finetuning/main.py": "rm",
         "training/step2_dpo_finetuning/main.py": "dpo", "training/step3_rlhf_finetuning/main.py": "ppo"}


@pytest.fixture(scope="module")
def fake_deepspeed(tmp_path_factory):
    """A ``deepspeed`` executable that writes its argv (one per line) to ``$CAPTURE`` instead of launching."""
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "deepspeed"
    script.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$0" "$@" > "$CAPTURE"\n')
    script.chmod(0o755)
    return str(bin_dir)


def launch(launcher: str, num_gpus: int, fake_bin: str, tmp_path, *flags, **env) -> list:
    capture = tmp_path / "argv.txt"
    overrides = ("MODEL_PATH", "SFT_PATH", "RM_PATH", "OUTPUT_DIR", "RUN_NAME", "HOSTFILE")  # the launcher's env
    environment = {key: value for key, value in os.environ.items() if key not in overrides}
    environment.update(PATH=f"{fake_bin}:{os.environ['PATH']}", CAPTURE=str(capture), NUM_GPUS=str(num_gpus),
                       MASTER_PORT="29555", OUTPUT_ROOT=str(tmp_path / "outputs"), PREFLIGHT="0", **env)
    # the pre-flight is tested below; here the checkpoints it would miss are made after the expansion
    subprocess.run(["bash", os.path.join(ROOT, launcher), *flags], env=environment, check=True,
                   capture_output=True, text=True, cwd=tmp_path)
    return capture.read_text().splitlines()


def parse_launch(argv: list, fake_bin: str, num_gpus: int):
    """``(stage, resolved flags)`` of a captured ``deepspeed`` command at ``num_gpus`` processes."""
    assert argv[0] == os.path.join(fake_bin, "deepspeed")  # the deepspeed on PATH
    assert argv[1:5] == ["--num_gpus", str(num_gpus), "--master_port", "29555"]
    stage = MAINS[argv[5]]
    for flag, value in zip(argv, argv[1:]):  # the earlier stages' checkpoints, which the parser checks exist
        if flag.endswith("model_name_or_path") and not value.startswith("google/"):
            os.makedirs(value, exist_ok=True)
            open(os.path.join(value, "config.json"), "w").close()
    args = stage_parser(stage).parse_config(argv[6:])
    from dschat.stages.resolve import resolve

    return stage, resolve(stage, args, num_gpus)


@pytest.mark.parametrize("num_gpus", [1, 8, 16])
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_launcher_expands_to_a_valid_command_at_every_scale(launcher, num_gpus, fake_deepspeed, tmp_path,
                                                            monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = launch(launcher, num_gpus, fake_deepspeed, tmp_path)
    name = os.path.basename(launcher)[:-3]
    if num_gpus == 1 and name.startswith("gemma2-27b") and "step3" in launcher:  # its vLLM engine spans 4 GPUs
        with pytest.raises(ConfigError, match="--vllm_tensor_parallel_size 4 must divide the 1 processes"):
            parse_launch(argv, fake_deepspeed, num_gpus)
        return
    stage, args = parse_launch(argv, fake_deepspeed, num_gpus)
    if stage == "ppo":
        assert args.per_device_generation_batch_size * num_gpus == args.global_batch_size
        assert args.per_device_generation_batch_size * args.num_samples_per_prompt % args.per_device_train_batch_size == 0
        assert args.ngram == (1 if name.endswith("_ppo") else 10 if "apps" in name else 5)
        assert args.offload == name.startswith("gemma2-27b")
        assert os.path.basename(args.output_dir) == ("ppo" if name.endswith("_ppo") else "mappo")
    else:
        assert args.global_batch_size is not None
        assert (args.per_device_train_batch_size * args.gradient_accumulation_steps * num_gpus
                == args.global_batch_size)
        if stage == "sft":
            assert args.model_name_or_path.startswith("google/")


def test_a_rule_variant_gets_its_own_run_folder(fake_deepspeed, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    launcher = "scripts/step3_rlhf/gemma-2b_tldr_mappo.sh"
    fixed = parse_launch(launch(launcher, 8, fake_deepspeed, tmp_path), fake_deepspeed, 8)[1]
    parsing = parse_launch(launch(launcher, 8, fake_deepspeed, tmp_path, "--termination", "parsing"),
                           fake_deepspeed, 8)[1]
    assert parsing.termination == "parsing" and fixed.termination == "fixed"
    assert fixed.output_dir != parsing.output_dir
    assert parsing.output_dir.endswith("mappo-parsing")
    named = parse_launch(launch(launcher, 8, fake_deepspeed, tmp_path, "--termination", "parsing", RUN_NAME="mine"),
                         fake_deepspeed, 8)[1]
    assert named.output_dir.endswith("/mine")


def test_the_ppo_batch_is_the_configs_global_batch_without_gpus(fake_deepspeed, tmp_path, monkeypatch):
    """Without nvidia-smi the launcher falls back to one process; the global batch of Table 5 still holds."""
    monkeypatch.chdir(ROOT)
    args = parse_launch(launch("scripts/step3_rlhf/gemma-2b_tldr_ppo.sh", 1, fake_deepspeed, tmp_path),
                        fake_deepspeed, 1)[1]
    assert args.per_device_generation_batch_size == 256


def test_evaluation_is_packaged_so_python_m_evaluation_works_from_any_directory(tmp_path):
    """The package as pip installs it (not this checkout): ``python -m evaluation.…`` runs from elsewhere and
    imports the installed copy, and the shipped tokenizer travels with ``dschat``."""
    source, target, elsewhere = tmp_path / "source", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    source.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("setup.py", "dschat", "evaluation"):  # a copy, so the build leaves nothing in the checkout
        (shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy)(
            os.path.join(ROOT, name), source / name, **({"ignore": skip} if name != "setup.py" else {}))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-compile", "-q",
                    "--target", str(target), str(source)], check=True, capture_output=True, cwd=elsewhere)
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run([sys.executable, "-m", "evaluation.paper_numbers", "--help"], cwd=elsewhere, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0 and "table2" in run.stdout, run.stderr
    where = subprocess.run([sys.executable, "-c", "import evaluation, dschat; print(evaluation.__file__); "
                            "print(dschat.__file__)"], cwd=elsewhere, env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    assert all(path.startswith(str(target)) for path in where), where
    assert (target / "dschat" / "assets" / "tokenizer" / "tokenizer.json").is_file()


def test_launcher_tees_the_run_to_training_log_and_keeps_its_exit_status(tmp_path):
    """What the run prints reaches the terminal and ``OUTPUT_DIR/training.log`` (after the command line), and
    the launcher exits with the run's status, not tee's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "deepspeed").write_text('#!/usr/bin/env bash\necho "step 1 | loss=2.5"\necho "warning" >&2\nexit 3\n')
    (bin_dir / "deepspeed").chmod(0o755)
    out = tmp_path / "run"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NUM_GPUS": "1", "OUTPUT_DIR": str(out),
           "PREFLIGHT": "0"}
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "launch.sh"), "sft", "gemma-2b", "tldr"],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 3
    assert "step 1 | loss=2.5" in result.stdout and "warning" in result.stdout
    log = (out / "training.log").read_text().splitlines()
    assert log[0].startswith("+ ") and "training/step1_supervised_finetuning/main.py" in log[0]
    assert log[1:] == ["step 1 | loss=2.5", "warning"]


def preflight_launch(tmp_path, fake_bin, launcher, **env):
    """Run ``launcher`` with its pre-flight on, no GPU, no hub token and no network (HF_HUB_OFFLINE)."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DS_ACCELERATOR", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "CUDA_VISIBLE_DEVICES")}
    environment.update(PATH=f"{fake_bin}:{os.environ['PATH']}", CAPTURE=str(tmp_path / "argv.txt"), NUM_GPUS="1",
                       OUTPUT_ROOT=str(tmp_path / "outputs"), PYTHON=sys.executable, PYTHONPATH=ROOT,
                       HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), **env)
    return subprocess.run(["bash", os.path.join(ROOT, launcher)], env=environment, capture_output=True, text=True,
                          cwd=tmp_path)


def test_preflight_lists_every_missing_thing_before_anything_starts(fake_deepspeed, tmp_path):
    """Step 3 on a machine without GPUs, SFT model, reward model or cached data: one line for each, exit 2, no
    deepspeed started, no folder made."""
    result = preflight_launch(tmp_path, fake_deepspeed, "scripts/step3_rlhf/gemma-2b_tldr_mappo.sh")
    assert result.returncode == 2, result.stderr
    missing = [line for line in result.stdout.splitlines() if line.startswith("MISSING")]
    outputs = tmp_path / "outputs"
    assert [line.split()[1] for line in missing] == ["GPUs:", "model", "model", "data"], result.stdout
    assert f"--actor_model_name_or_path no such directory {outputs}/sft/gemma-2b/tldr" in missing[1]
    assert f"--critic_model_name_or_path no such directory {outputs}/rm/gemma-2b/tldr" in missing[2]
    assert "HF_HUB_OFFLINE is set" in missing[3] and "hf download openai/summarize_from_feedback" in missing[3]
    assert result.stderr.strip().splitlines()[-1].startswith("error: pre-flight: 4 thing(s) missing")
    assert not (tmp_path / "argv.txt").exists() and not outputs.exists()


def test_preflight_names_gemma_as_gated_and_passes_a_cpu_run_that_has_everything(fake_deepspeed, tmp_path):
    result = preflight_launch(tmp_path, fake_deepspeed, "scripts/step1_sft/gemma-2b_tldr.sh", DS_ACCELERATOR="cpu")
    assert result.returncode == 2
    assert ("MISSING model --model_name_or_path google/gemma-2b: not in the hub cache, and a gated model: accept its "
            "licence at https://huggingface.co/google/gemma-2b and log in") in result.stdout
    assert "ok      GPUs: not used (DS_ACCELERATOR=cpu)" in result.stdout
    result = preflight_launch(tmp_path, fake_deepspeed, "scripts/step1_sft/gemma-2b_tldr.sh", DS_ACCELERATOR="cpu",
                              MODEL_PATH="tiny-gemma")
    assert "MISSING data tldr" in result.stdout and not (tmp_path / "argv.txt").exists()


def test_preflight_refuses_a_run_inside_another_stages_model_folder(tmp_path):
    from dschat.cli.preflight import output_check

    model = tmp_path / "outputs" / "sft"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    check = output_check(str(model / "gemma-2b" / "tldr"), ["google/gemma-2b"])
    assert not check.ok and "inside the model folder" in check.line
    check = output_check(str(tmp_path / "outputs"), ["tiny-gemma"])  # a run folder that holds a model
    assert not check.ok and "holds another model folder" in check.line
    assert output_check(str(tmp_path / "runs" / "sft"), ["tiny-gemma"]).ok
    assert not output_check(str(model), [str(model)]).ok  # writing over its own input model


def test_rollout_gpus_split_the_node_between_trainers_and_producers(fake_deepspeed, tmp_path, monkeypatch):
    """ROLLOUT_GPUS=4 of 8: deepspeed trains on the first 4 (--num_gpus 4), the producers sample on 4-7."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    launcher = "scripts/step3_rlhf/gemma-2b_tldr_mappo.sh"
    argv = launch(launcher, 8, fake_deepspeed, tmp_path, "--async_rollout", "1", ROLLOUT_GPUS="4")
    assert argv[-5:] == ["--rollout_gpus", "4", "5", "6", "7"]
    args = parse_launch(argv, fake_deepspeed, 4)[1]
    assert (args.async_rollout, args.rollout_gpus) == (1, (4, 5, 6, 7))
    for value, message in (("8", "ROLLOUT_GPUS=8 leaves none of the 8 GPUs to train"),
                           ("two", "ROLLOUT_GPUS=two: expected a GPU count")):
        with pytest.raises(subprocess.CalledProcessError) as refused:
            launch(launcher, 8, fake_deepspeed, tmp_path, ROLLOUT_GPUS=value)
        assert refused.value.stderr.strip() == f"error: {message}"
