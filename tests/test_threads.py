"""Intra-op threads (issue 33): one default, set in one shell file for every script and applied by every Python
entry point run without the scripts; ``MARLHF_THREADS`` raises it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from dschat.core.entrypoint import DEFAULT_THREADS

THREAD_VARS = ("MARLHF_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def clean_env(**extra) -> dict:
    return {**{k: v for k, v in os.environ.items() if k not in THREAD_VARS}, **extra}


def shell_threads(script: str, **extra) -> str:
    """``OMP_NUM_THREADS MKL_NUM_THREADS`` once ``script`` (a sourced scripts/ file) has run."""
    command = f'source "{script}" >/dev/null; echo "$OMP_NUM_THREADS $MKL_NUM_THREADS"'
    return subprocess.run(["bash", "-c", command], env=clean_env(**extra), capture_output=True, text=True,
                          check=True, cwd=ROOT).stdout.strip()


@pytest.mark.parametrize("extra, expected", [({}, f"{DEFAULT_THREADS} {DEFAULT_THREADS}"),
                                             ({"MARLHF_THREADS": "3"}, "3 3"),
                                             ({"OMP_NUM_THREADS": "2"}, "2 2")])
def test_scripts_share_one_default_that_marlhf_threads_raises(extra, expected):
    assert shell_threads(os.path.join(ROOT, "scripts", "threads.sh"), **extra) == expected
    # what the reproduce scripts and the demo source (env.sh installs nothing when the environment exists)
    if os.path.isfile(os.path.join(ROOT, ".venv", "bin", "python")):
        assert shell_threads(os.path.join(ROOT, "scripts", "reproduce", "env.sh"), **extra) == expected


@pytest.mark.parametrize("script", ["scripts/demo.sh", "scripts/test.sh", "scripts/launch.sh",
                                    "scripts/reproduce/env.sh"])
def test_every_entry_script_takes_the_shared_setting(script):
    text = open(os.path.join(ROOT, script)).read()
    assert "threads.sh" in text or "reproduce/env.sh" in text, f"{script} does not source scripts/threads.sh"


PROBE = ("from dschat.core.entrypoint import run_cli\n"
         "def main():\n"
         "    import os, torch\n"
         "    print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])\n"
         "run_cli(main)\n")


@pytest.mark.parametrize("extra, expected", [({}, DEFAULT_THREADS), ({"MARLHF_THREADS": "2"}, 2)])
def test_python_entry_points_apply_the_default_without_the_scripts(extra, expected):
    env = clean_env(PYTHONPATH=ROOT, **extra)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(expected)] * 3


def test_a_bad_thread_count_is_one_line():
    env = clean_env(PYTHONPATH=ROOT, MARLHF_THREADS="many")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.strip() == "error: MARLHF_THREADS many: expected a positive integer"
