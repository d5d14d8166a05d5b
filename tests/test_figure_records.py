"""Figures whose raw output was never committed, each kept in a record file that says so (what was measured,
where, by which command): the pages quote the record (editing a figure on a page, or in the record, fails here),
and whatever can be recomputed without the lost machine is recomputed — the memory plan's side of the H100
comparison, the ratios the pages round."""
from __future__ import annotations

import json
import os
import re
import shlex

import pytest

from conftest import ROOT
from dschat.cli import plan
from dschat.training.memory_plan import GIB, generation_activations, training_activations

H100 = os.path.join("docs", "gpu", "h100_gemma2b_memory.json")
TRL = os.path.join("docs", "trl", "bench_vs_trl_cpu.json")


def record(path: str) -> dict:
    with open(os.path.join(ROOT, path)) as handle:
        return json.load(handle)


def page(name: str) -> str:
    """The page's text with its whitespace (line breaks) collapsed."""
    with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as handle:
        return " ".join(handle.read().split())


def step3_plan() -> plan.Plan:
    """The plan of scripts/benchmarks/gpu/step3_gemma2b.sh's flags (its models are the config's gemma-2b shape)."""
    with open(os.path.join(ROOT, "scripts", "benchmarks", "gpu", "step3_gemma2b.sh")) as handle:
        flags = shlex.split(re.search(r"FLAGS=\((.*?)\)", handle.read(), re.S).group(1))
    config = flags[flags.index("--config") + 1]
    paths = {"--config", "--actor_model_name_or_path", "--critic_model_name_or_path", "--output_dir"}
    overrides = [token for i, token in enumerate(flags) if token not in paths and flags[i - 1] not in paths]
    return plan.make_plan(os.path.join(ROOT, config), 1, overrides=tuple(overrides))


@pytest.fixture(scope="module")
def planned() -> dict:
    """The memory plan's GiB for the H100 runs, recomputed now."""
    shape = plan.model_shape("gemma-2b")
    step3 = step3_plan()
    return {"parameters": 2 * shape.params / GIB,  # bf16
            "train_above_parameters": training_activations(shape, "bf16", 2, 1024, False) / GIB,
            "generate_above_parameters": generation_activations(shape, "bf16", 8, 512, 512) / GIB,
            "states": step3.states / GIB, "largest_phase": max(bytes_ for _, bytes_ in step3.phases) / GIB,
            "peak": step3.peak / GIB}


def test_the_h100_memory_table_is_its_record_against_the_plan_today(planned):
    measured = record(H100)
    terms, step3 = measured["per_term"]["measured_gib"], measured["step3"]["measured_gib"]
    text = page("memory_plan.md")
    for term, label in (("parameters", "parameters (bf16)"),
                        ("train_above_parameters", "training forward + backward, 2 × 1024 tokens"),
                        ("generate_above_parameters", "generation, 8 × (512 + 512) tokens")):
        row = re.search(re.escape(label) + r"[^|]*\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", text).groups()
        assert row[:2] == (f"{terms[term]:.2f}", f"{planned[term]:.2f}"), term
        ratio = float(row[2])  # the page's ratio is of the unrounded measurement: within its rounding here
        assert planned[term] / (terms[term] + 0.005) - 0.005 <= ratio <= planned[term] / (terms[term] - 0.005) + 0.005
    for label, value in (("plan: model states", planned["states"]), ("plan: largest phase", planned["largest_phase"]),
                         ("**plan: peak per GPU**", planned["peak"]),
                         ("**measured: peak allocated**", step3["peak_allocated"]),
                         ("measured: peak reserved", step3["peak_reserved"])):
        assert re.search(re.escape(label) + r"[^|]*\| \**([\d.]+)\** \|", text).group(1) == f"{value:.2f}", label
    assert f"The plan is {planned['peak'] / step3['peak_allocated']:.2f} of the measured peak" in text
    assert H100 in text and measured["per_term"]["command"].split()[1] in text


def test_the_launchers_page_quotes_the_same_h100_figures(planned):
    measured = record(H100)
    terms, step3 = measured["per_term"]["measured_gib"], measured["step3"]["measured_gib"]
    text = page("launchers.md")
    for term in ("parameters", "train_above_parameters", "generate_above_parameters"):
        assert f"{terms[term]:.2f} vs {planned[term]:.2f}" in text, term
    assert f"peaked at {step3['peak_allocated']:.2f} GiB allocated against a planned {planned['peak']:.2f}" in text


def test_the_trl_table_is_its_record():
    runs = record(TRL)["runs"]
    text = page("benchmarks.md")
    assert TRL in text

    def cell(values) -> str:
        return f"{values[0]:.3f} [{values[1]:.3f}, {values[2]:.3f}]"

    for algo, run in runs.items():
        row = re.search(rf"\| `{algo}`[^\n]*?\| {re.escape(run['trl'].split()[0])} `{run['trl'].split()[1]}` \|(.*?)\|"
                        r" ([^|]*) \| ([^|]*) \| \*\*([\d.]+)\*\* ([^|]*) \| ([^|]*) \| ([^|]*) \|", text)
        assert row is not None, algo
        _, project, trl, ratio, ratio_range, wall, lengths = row.groups()
        assert (project.strip(), trl.strip()) == (cell(run["project_cpu_s_per_step"]), cell(run["trl_cpu_s_per_step"]))
        assert f"{ratio} {ratio_range.strip()}" == cell(run["ratio_cpu"]) and wall.strip() == cell(run["ratio_wall"])
        assert lengths.strip() == " / ".join(map(str, run["response_length"]))
        assert run["command"] in text
        median, low, high = run["ratio_cpu"]
        assert low <= median <= high  # the median of the paired ratios, within their range
    prose = f"costs {runs['grpo']['ratio_cpu'][0]:.2f} of TRL's for GRPO and {runs['ppo']['ratio_cpu'][0]:.2f} of it for PPO"
    assert prose in text
