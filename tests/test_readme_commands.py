"""Every command in the ``bash`` blocks of the README and of the documentation's pages works as written, so neither
can drift (issues 15, 41).

The blocks run with bash, the README's first and then the pages' in the site's reading order (``mkdocs.yml``'s nav,
which must list every page under ``docs/``), in a scratch directory that links the repository's files and puts a
stand-in at ``.venv/bin/python`` (and ``.venv/bin/transformers``, ``.venv/bin/mkdocs``) which records each command
line:

- ``test_every_readme_command_parses`` (default suite): the stand-in only records; each recorded Python command is
  then parsed by its own entry point's argparse parser (in this process, in the scratch directory, stopped right
  after ``parse_args``; ``mkdocs``: by its click command): every flag exists, required flags are given, values have
  their types. What an earlier command writes (its ``--output_dir``: a HF checkpoint, for step 3 ``actor``/``critic``
  inside) is made as a stand-in before a later command is parsed, so the verdict never depends on the repository's
  ``outputs/``.
  A ``bash scripts/X.sh`` line is not run (those scripts install into ``.venv``); its script must exist.
- ``test_readme_commands_run`` (``-m slow``: 13 processes, 286 s on 2 busy cores): the stand-in runs the real
  interpreter, with the documented override ``--max_steps 2 --max_eval_samples 16`` appended to every
  ``training/*/main.py`` command (argparse: the last value wins). Blocks left to other targets:
  ``bash scripts/...`` (they install into ``.venv``; the demo runs the flags of "Stages"), the judge against
  ``transformers serve`` (the ``-m integration`` target), the benchmarks (minutes each; they print figures), the
  docs site (``tests/test_docs_site.py`` builds it; ``mkdocs serve`` never returns).
  The example files the commands name ship with the repository (``docs/examples/``).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import runpy
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List
from unittest import mock

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SHORTEN = ["--max_steps", "2", "--max_eval_samples", "16"]
NOT_RUN = {"bash scripts/": "installs into .venv", "transformers serve": "the -m integration target",
           "llama_cpp.server": "the -m integration target (requirements-judge.txt)",
           "scripts/benchmarks/": "benchmarks print figures, minutes each",
           "mkdocs": "tests/test_docs_site.py builds the site; serve never returns"}

STAND_IN = """#!{python}
import json, os, sys
prog, argv = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["README_TEST_RECORD"], "a") as handle:
    handle.write(json.dumps({{"prog": prog, "argv": argv}}) + "\\n")
if os.environ.get("README_TEST_RUN") != "1":
    print("recorded-" + prog)  # what a command substitution receives
    sys.exit(0)
if prog == "transformers":
    argv = ["-m", "transformers.cli.transformers"] + argv
elif prog == "mkdocs":
    argv = ["-m", "mkdocs"] + argv
elif argv and argv[0].startswith("training/"):
    argv = argv + {shorten!r}
os.execv(sys.executable, [sys.executable] + argv)
"""


def bash_blocks(markdown: str) -> List[str]:
    """A page's ```bash blocks (also indented ones inside list items), dedented."""
    return [textwrap.dedent(body) for body in re.findall(r"^([ \t]*)```bash\n(.*?)^\1```", markdown, re.S | re.M)
            for body in [body[1]]]


def logical_lines(block: str) -> List[str]:
    """Commands of a block: continuation lines joined, blank and comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def nav_pages(nav) -> List[str]:
    """The pages of an ``mkdocs.yml`` nav (a list of paths and ``{title: path or list}``), in reading order."""
    pages = []
    for entry in nav:
        for item in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(item) if isinstance(item, list) else [item]
    return pages


PAGES = ["README.md"] + [f"docs/{page}" for page in nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])]
"""Every page whose commands this test checks, in the order its blocks run."""
BLOCKS = [(page, block) for page in PAGES for block in bash_blocks((ROOT / page).read_text())]
"""(page, block) of every ```bash block, in order."""


def test_the_nav_lists_every_page():
    """A page outside the nav would escape this test (and ``mkdocs build --strict``, which warns of it)."""
    assert sorted(PAGES[1:]) == sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*.md"))


@pytest.fixture()
def sandbox(tmp_path):
    """A directory that looks like the repository, with recording stand-ins in .venv/bin."""
    for entry in ROOT.iterdir():
        if entry.name not in {".venv", "outputs", ".git"}:
            (tmp_path / entry.name).symlink_to(entry)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "transformers", "mkdocs"):
        path = bin_dir / name
        path.write_text(STAND_IN.format(python=sys.executable, shorten=SHORTEN))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def run_block(sandbox: Path, block: str, run: bool) -> subprocess.CompletedProcess:
    """Run a block's commands (minus ``bash scripts/...`` lines) in one bash, so variables carry over."""
    lines = [line for line in logical_lines(block) if not line.startswith("bash scripts/")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "README_TEST_RECORD": str(sandbox / "record.jsonl"), "README_TEST_RUN": "1" if run else "0",
           "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    script = "set -euo pipefail\n" + "\n".join(lines) + "\nwait\n"
    return subprocess.run(["bash", "-c", script], cwd=sandbox, env=env, capture_output=True, text=True,
                          timeout=1800)


def recorded(sandbox: Path) -> List[dict]:
    path = sandbox / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Parsed(BaseException):
    """Raised right after the entry point's parse_args succeeded (BaseException: no ``except`` swallows it)."""


def parse_only(argv: List[str], capsys) -> argparse.Namespace:
    """Run ``python ARGV``'s entry point up to its ``ArgumentParser.parse_args`` and return the namespace."""
    original = argparse.ArgumentParser.parse_args
    parsed = {}

    def intercept(self, args=None, namespace=None):
        parsed["args"] = original(self, args, namespace)
        raise Parsed

    module = argv[1] if argv[0] == "-m" else None
    program = [module] + argv[2:] if module else [str(ROOT / argv[0])] + argv[1:]
    with mock.patch.object(argparse.ArgumentParser, "parse_args", intercept), mock.patch.object(sys, "argv", program):
        try:
            if module:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(program[0], run_name="__main__")
        except Parsed:
            return parsed["args"]
        except (SystemExit, ValueError) as exit_:
            pytest.fail(f"documented command `python {' '.join(argv)}` does not parse: {capsys.readouterr().err.strip()}"
                        f" ({exit_!r})")
    pytest.fail(f"documented command `python {' '.join(argv)}` never parsed its arguments")


def parse_mkdocs(argv: List[str]) -> None:
    """Parse ``mkdocs ARGV`` with mkdocs' own click command (without running it)."""
    import click
    from mkdocs.__main__ import cli

    try:
        command = cli.commands[argv[0]]
        command.make_context(argv[0], argv[1:])
    except (KeyError, IndexError, click.ClickException) as error:
        pytest.fail(f"command `mkdocs {' '.join(argv)}` does not parse: {error!r}")


def test_readme_has_the_commands_this_test_checks():
    commands = [line for _, block in BLOCKS for line in logical_lines(block)]
    for entry in ("training/step1_supervised_finetuning/main.py", "training/step2_reward_model_finetuning/main.py",
                  "training/step3_rlhf_finetuning/main.py", "training/step2_dpo_finetuning/main.py",
                  "dschat.cli.viewer", "evaluation.judge", "evaluation.rm_score"):
        assert any(entry in line for line in commands), f"no documented command runs {entry}"


def stand_in_outputs(sandbox: Path, argv: List[str]) -> None:
    """What ``argv``'s training stage leaves in its ``--output_dir`` (a HF checkpoint; step 3: ``actor`` and
    ``critic``), as empty-config stand-ins under ``sandbox``, for the documented commands that read it later."""
    if not (argv and argv[0].startswith("training/") and "--output_dir" in argv):
        return
    output_dir = sandbox / argv[argv.index("--output_dir") + 1]
    for final in [output_dir / "actor", output_dir / "critic"] if "step3" in argv[0] else [output_dir]:
        final.mkdir(parents=True, exist_ok=True)
        (final / "config.json").write_text("{}")


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
def test_every_readme_command_parses(sandbox, capsys, monkeypatch):
    expected = 0
    for page, block in BLOCKS:
        for line in logical_lines(block):
            if line.startswith("bash scripts/"):
                script = line.split()[1]
                assert (ROOT / script).is_file(), f"{page} runs {script}, which does not exist"
            expected += len(re.findall(r"(?<![=\w])(?:\$PY|\.venv/bin/(?:python|transformers|mkdocs))\b", line))
        result = run_block(sandbox, block, run=False)
        assert result.returncode == 0, f"{page}: block failed:\n{block}\n{result.stderr}"
    commands = recorded(sandbox)
    assert len(commands) == expected  # every command line was seen
    monkeypatch.chdir(sandbox)  # relative paths resolve in the scratch directory, never in the repository
    for command in commands:
        placeholders = [arg for arg in command["argv"] if arg in ("...", "…") or re.fullmatch(r"<[^>]+>", arg)]
        assert not placeholders, f"documented command {command['argv']} has placeholders {placeholders}"
        for flag in ("--file", "--config"):  # files the pages name ship with the repository
            if flag in command["argv"]:
                path = command["argv"][command["argv"].index(flag) + 1]
                assert (ROOT / path).is_file(), f"documented command names {path}, which is not in the repository"
        if command["prog"] == "transformers":
            assert command["argv"][0] == "serve"
            continue
        if command["prog"] == "mkdocs":
            parse_mkdocs(command["argv"])
            continue
        if command["argv"][:2] == ["-m", "llama_cpp.server"] and importlib.util.find_spec("llama_cpp") is None:
            continue  # opt-in: requirements-judge.txt
        parse_only(command["argv"], capsys)
        stand_in_outputs(sandbox, command["argv"])


@pytest.mark.slow
def test_readme_commands_run(sandbox):
    for page, block in BLOCKS:
        skipped = [reason for marker, reason in NOT_RUN.items() if marker in block]
        if skipped:
            continue
        result = run_block(sandbox, block, run=True)
        assert result.returncode == 0, f"{page}: block failed:\n{block}\n{result.stderr[-3000:]}"
    trained = [c["argv"] for c in recorded(sandbox) if c["argv"] and c["argv"][0].startswith("training/")]
    assert len(trained) == 12  # SFT, RM, PPO of "Stages", DPO, and the objective's SFT, RM and six recipes
    for argv in trained:
        output_dir = sandbox / argv[argv.index("--output_dir") + 1]
        final = output_dir / "actor" if "step3" in argv[0] else output_dir  # "Stages": the actor in <output_dir>/actor
        assert (final / "config.json").is_file() and any(final.glob("*.safetensors")), final
        assert (output_dir / "metrics.jsonl").stat().st_size > 0
