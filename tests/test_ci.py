"""``.ci/run``: the default suite runs once, as the README's second command after the first on a fresh clone, and
every stage is timed (its elapsed time printed, and listed again at the end, pass or fail)."""
import os
import re
import subprocess

from conftest import ROOT

CI = os.path.join(ROOT, ".ci", "run")


def commands() -> list:
    """The script's command lines, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", open(CI).read())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_default_suite_runs_once_after_the_demo_in_the_clone():
    lines = commands()
    suites = [i for i, line in enumerate(lines) if "scripts/test.sh" in line and "-m " not in line]
    demos = [i for i, line in enumerate(lines) if "scripts/demo.sh" in line]
    assert len(suites) == 1 and len(demos) == 1 and demos[0] < suites[0], lines
    assert all(lines[i].startswith("stage ") and "in_clone" in lines[i] for i in suites + demos)
    runs = [line for line in lines if re.search(r"scripts/|ruff|pip install", line) and "=" not in line.split()[0]]
    assert all(line.startswith("stage ") for line in runs), runs  # nothing runs untimed


def test_each_stage_prints_its_time_and_a_failure_lists_the_times_so_far(tmp_path):
    head = open(CI).read().split("\nstage setup")[0].replace('cd "$(dirname "${BASH_SOURCE[0]}")/.."', "")
    script = tmp_path / "ci.sh"
    script.write_text(head + "\nstage quick true\nstage broken false\nstage never true\n")
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert result.returncode == 1
    out = result.stdout.splitlines()
    assert re.fullmatch(r"== quick +0 min 0\d s ==", out[1]), out
    assert out[-3:-1] == ["== CI stages (elapsed) ==", out[1].strip("= ")] and "never" not in result.stdout
    assert out[-1].startswith("== CI failed (exit 1)")
