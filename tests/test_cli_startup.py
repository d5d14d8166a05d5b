"""The stages' command lines answer ``--help`` and flag errors at once: no torch, DeepSpeed or transformers is
imported before the flags are good, and unknown datasets and missing model paths are refused by the parser
(issue: first contact, item 1). The timing figures come from ``scripts/benchmarks/bench_startup.py``; the bound
here is generous, on CPU time (the wall time of a loaded 2-core machine mostly measures waiting)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from dschat.cli import stage_parser
from dschat.core.config import ConfigError

sys.path.insert(0, os.path.join(ROOT, "scripts", "benchmarks"))
from bench_startup import CASES, STAGES, expected_code, run_once  # noqa: E402

HEAVY = ("torch", "deepspeed", "transformers", "datasets")


def test_stage_command_lines_import_no_heavy_library():
    code = ("import sys\nfrom dschat.cli import sft, rm, dpo, ppo\n"
            "for module in (sft, rm, dpo, ppo):\n    module.build_parser().format_help()\n"
            f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("stage", STAGES)
def test_help_and_a_bad_flag_cost_under_two_cpu_seconds(stage):
    for case in CASES:
        wall, cpu, code = run_once(ROOT, stage, case)
        assert code == expected_code(case)
        assert cpu < 2.0, f"{stage} {case}: {cpu:.2f} CPU s"
        assert wall < 60


@pytest.mark.parametrize("flags, expected", [
    (["--data_name", "tldrr"], "--data_name tldrr: expected one of apps, arithmetic, gsm8k, hh-rlhf"),
    (["--model_name_or_path", "outputs/sfft"], "--model_name_or_path no such directory outputs/sfft"),
    (["--model_name_or_path", "./nope"], "--model_name_or_path no such directory ./nope"),
], ids=["unknown-dataset", "missing-dir-shaped-like-a-hub-id", "missing-relative-dir"])
def test_parser_refuses_unknown_datasets_and_missing_paths(tmp_path, monkeypatch, flags, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()  # where earlier stages write: outputs/sfft is a local path, not a hub id
    with pytest.raises(ConfigError) as error:
        stage_parser("sft").parse_config(["--output_dir", "out"] + flags)
    assert str(error.value).startswith(expected)


def test_parser_accepts_hub_ids_offline_names_and_checkpoints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    for name in ("google/gemma-2b", "tiny-gemma", "smollm2-135m-instruct", "ckpt"):
        args = stage_parser("rm").parse_config(["--output_dir", "out", "--model_name_or_path", name])
        assert args.model_name_or_path == name
    with pytest.raises(ConfigError, match="no config.json"):
        stage_parser("ppo").parse_config(["--output_dir", "out", "--actor_model_name_or_path", "."])


@pytest.mark.parametrize("fails", [False, True], ids=["ends-well", "fails"])
def test_a_run_that_ends_well_destroys_its_process_group_at_exit(tmp_path, fails):
    """Left to interpreter teardown, gloo's threads can abort a finished process (SIGABRT); a run that ended well
    destroys the group from ``atexit`` (after the stage, so that another stage may still run in-process), a failed
    one leaves it (a destroy could hang while another rank waits in a collective). The checker registered first
    runs last."""
    script = tmp_path / "run.py"
    script.write_text(
        "import atexit, os, torch.distributed as dist\n"
        "from dschat.core.entrypoint import run_cli\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='0')\n"
        "dist.init_process_group('gloo', rank=0, world_size=1)\n"
        "atexit.register(lambda: print('initialized at exit:', dist.is_initialized(), flush=True))\n"
        f"def main():\n    if {fails}:\n        raise ValueError('bad flag')\n"
        "run_cli(main)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert f"initialized at exit: {fails}" in result.stdout
    assert result.returncode == (2 if fails else 0)
