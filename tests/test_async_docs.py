"""The asynchronous-rollouts page quotes what its commands printed: the speed table is the committed
``bench_async.py`` outputs', the learning table the report regenerated from the committed runs, the Gemma-7B
projection what ``project_async.py`` prints today."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = Path(ROOT) / "docs"
PAGE = DOCS / "async-rollouts.md"
SHAPES = ("long", "tiny", "smollm2", "long_idle", "tiny_idle")


def page() -> str:
    return " ".join(PAGE.read_text().replace("−", "-").split())


def bench(shape: str) -> dict:
    """``{variant: {figure: median}}`` and ``{"ratios": {line: (median, low, high)}}`` of one committed output."""
    text = (DOCS / "async" / f"bench_async_{shape}_cpu.txt").read_text()
    found: dict = {"ratios": {}}
    for line in text.splitlines():
        variant = re.match(r"^(sync-[12]t|async-[12]) +s/iteration", line)
        if variant:
            found[variant.group(1)] = {name.strip(): float(value) for name, value in
                                       re.findall(r"([a-z/ ]+?) (-?[\d.]+) \[", line[len(variant.group(1)):])}
        ratio = re.match(r"^(async-[12] .+): (-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]$", line)
        if ratio:
            found["ratios"][ratio.group(1)] = ratio.group(2, 3, 4)
    return found


@pytest.mark.parametrize("shape", SHAPES)
def test_the_speed_table_is_the_committed_outputs(shape):
    figures, text = bench(shape), page()
    sync2, sync1, ahead = figures["sync-2t"], figures["sync-1t"], figures["async-1"]
    rest = sync1["s/iteration"] - sync1["generate"]
    row = (f"| {sync2['s/iteration']:.3f} s | {sync1['generate']:.3f} / {rest:.3f} s | "
           f"{ahead['trainer busy']:.3f} / {ahead['producer busy']:.3f} s | ")
    assert row in text, row
    ratios = figures["ratios"]
    for line, bold in (("async-1 speed-up over sync-2t", True), ("async-1 iteration / its slower side's busy time", False),
                       ("async-1 over sync-1t, measured / predicted from sync-1t's split - 1", False)):
        median, low, high = ratios[line]
        quoted = f"{median} [{low}, {high}]"
        assert (f"**{median}** [{low}, {high}]" if bold else quoted) in text, line
    assert f"bench_async_{shape}_cpu.txt" in text


def test_the_learning_report_is_generated_from_the_committed_runs():
    """``python -m evaluation.async_learning report`` writes report.md from runs.jsonl; rendering the committed
    runs again gives the committed report, and the page quotes its tables."""
    from evaluation.async_learning import report_lines

    runs = [json.loads(line) for line in (DOCS / "async" / "runs.jsonl").read_text().splitlines()]
    report = (DOCS / "async" / "report.md").read_text()
    reruns = [json.loads(line) for line in (DOCS / "study/machine_reruns.jsonl").read_text().splitlines()]
    assert report == "\n".join(report_lines(runs, reruns)) + "\n"
    assert "16 of the K = 0 runs equal, bit for bit at every evaluation, the study's machine reruns" in report
    text = " ".join(PAGE.read_text().split())
    for line in report.splitlines():
        if line.startswith("| ppo") or line.startswith("| mappo"):
            assert line in text, line
    assert len(runs) == 32 and {r["machine"]["cpu"] for r in runs} == {runs[0]["machine"]["cpu"]}


def test_the_projection_is_what_the_script_prints():
    script = Path(ROOT) / "scripts" / "benchmarks" / "project_async.py"
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout
    assert printed == (DOCS / "async" / "projection.txt").read_text()
    text = page()
    for name, speed in re.findall(r"^(dynamic cache|static cache \+ compile): .*?best split \S+: [\d.]+ s, ([\d.]+)x",
                                  printed, re.M | re.S):
        assert f"{speed}×" in text, name


def test_the_learning_section_names_its_commit_what_changed_since_and_its_models():
    """The runs' commit as the page names it; no "since unchanged" where git shows the producer changed after it;
    the step-0 RM that shows the SFT and reward model were retrained; the two speed-ups, each said as what it is."""
    runs = [json.loads(line) for line in (DOCS / "async" / "runs.jsonl").read_text().splitlines()]
    study = [json.loads(line) for line in (DOCS / "study" / "runs.jsonl").read_text().splitlines()]
    (commit,) = {r["commit"][:7] for r in runs}
    text = page()
    assert f"Trained at commit `{commit}`" in text
    changed = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", commit, "HEAD", "--",
                              "dschat/rlhf/rollout/producer.py"], capture_output=True).returncode
    if changed == 1:  # 0: unchanged; 128: no git or the commit is not in this clone
        assert "since unchanged" not in text and "The producer has changed since" in text
    committed = next(r for r in study if (r["task"], r["arm"], r["seed"]) == ("long", "ppo-lam1", 9))
    assert f"{runs[0]['rm'][0]:.3f} against {committed['rm'][0]:.3f}" in text
    sync2, async1 = bench("long")["sync-2t"]["s/iteration"], bench("long")["async-1"]["s/iteration"]
    median_of_ratios = float(bench("long")["ratios"]["async-1 speed-up over sync-2t"][0])
    assert f"{sync2} / {async1} = {sync2 / async1:.2f}× sooner (the ratio of the two variants' medians; the " \
           f"{median_of_ratios:.2f}× in" in text
    assert "pre-registered" not in text


def test_the_partial_rollout_table_is_the_committed_output():
    """The page's partial-rollout rows and ratio are what ``bench_async.py`` printed on idle cores (committed output),
    with the load it ran under; the earlier run on loaded cores is quoted with its ratio and load."""
    text = (DOCS / "async" / "bench_async_long_idle_cpu.txt").read_text()
    quoted = page()
    for variant in ("async-1", "async-1p"):
        line = next(line for line in text.splitlines() if line.startswith(f"{variant} ") and "s/iteration" in line)
        for figure in ("s/iteration", "steps/hour", "wait for trainer"):
            value = re.search(rf"{figure} (\S+ \[\S+ \S+\])", line).group(1)
            assert value in quoted, (variant, figure, value)
    ratio = re.search(r"async-1p steps/hour over async-1: (\S+) \[(\S+), (\S+)\]", text).groups()
    assert f"**{ratio[0]} [{ratio[1]}, {ratio[2]}]×**" in quoted
    load = re.search(r"1-minute load over the runs: \S+ \[(\S+), (\S+)\]", text).groups()
    assert f"2 idle cores** (1-minute load {load[0]}-{load[1]})" in quoted and float(load[1]) < 2
    loaded = (DOCS / "async" / "bench_async_partial_long_cpu.txt").read_text()
    ratio = re.search(r"async-1p steps/hour over async-1: (\S+) \[(\S+), (\S+)\]", loaded).groups()
    load = re.search(r"1-minute load over the runs: \S+ \[(\S+), (\S+)\]", loaded).groups()
    assert f"{ratio[0]} [{ratio[1]}, {ratio[2]}]× on cores shared with other jobs at load " \
           f"{float(load[0]):.1f}-{float(load[1]):.1f}" in quoted


def test_the_partial_rollout_learning_rows_are_the_committed_records():
    """Every seed with both arms of ``docs/study/async-partial.jsonl`` finished is a row of the page with their final
    gold; the page counts the records and the failed ones."""
    from evaluation.async_partial import RECORDS, read_records

    records, text = read_records(RECORDS), page()
    final = {(r["arm"], r["seed"]): r["final_gold"] for r in records if not r["failed"]}
    seeds = sorted({seed for arm, seed in final if (("k1", seed) in final and ("k1-partial", seed) in final)})
    assert seeds
    for seed in seeds:
        row = f"| {seed} | {final[('k1', seed)]:.4f} | {final[('k1-partial', seed)]:.4f} |"
        assert row in text, row
    failed = sum(r["failed"] for r in records)
    assert f"{len(records)} runs recorded ({failed} failed or unfinished)" in text


def test_the_partial_rollout_verdict_is_the_plans_analysis_of_the_records():
    """The page's summary line is the analysis of the committed records, recomputed here from the seeds' final gold
    with scipy (mean, 95% t interval, t test, TOST within the plan's ±0.010)."""
    from scipy import stats

    from evaluation.async_partial import RECORDS, read_records

    final = {(r["arm"], r["seed"]): r["final_gold"] for r in read_records(RECORDS) if not r["failed"]}
    diffs = [final[("k1-partial", s)] - final[("k1", s)] for arm, s in final if arm == "k1" and ("k1-partial", s) in final]
    n = len(diffs)
    mean = sum(diffs) / n
    se = (sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) ** 0.5
    q = stats.t.ppf(0.975, n - 1)
    p = 2 * stats.t.sf(abs(mean) / se, n - 1)
    tost_p = max(stats.t.sf((mean + 0.01) / se, n - 1), stats.t.cdf((mean - 0.01) / se, n - 1))
    reading = "equivalence" if tost_p < 0.05 else "difference" if p < 0.05 else "not decided"
    assert (f"Over the {n} paired seeds (`.venv/bin/python -m evaluation.async_partial report`), partial - K = 1 = "
            f"{mean:+.4f} [{mean - q * se:+.4f}, {mean + q * se:+.4f}] (95% t), t p = {p:.3f}, TOST p = {tost_p:.3f}"
            ) in page()
    assert f"**{reading}**" in page()


@pytest.mark.parametrize("shape", ["long_idle", "tiny_idle"])
def test_the_idle_rows_k2_figures_are_the_committed_outputs(shape):
    """The prose beside the idle-core rows quotes K = 2's speed-up over the 2-thread loop and the synchronous loops'
    iteration times from the committed output."""
    figures, text = bench(shape), page()
    median, low, high = figures["ratios"]["async-2 speed-up over sync-2t"]
    assert f"{median} [{low}, {high}]×" in text
    if shape == "tiny_idle":
        one, two = figures["sync-1t"]["s/iteration"], figures["sync-2t"]["s/iteration"]
        assert f"{one / two:.2f}× ({one:.3f} against {two:.3f} s" in text
