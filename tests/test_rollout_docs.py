"""The rollout-engine page's figures are the committed outputs of the benchmark commands it names (issue 30)."""
from __future__ import annotations

import os

import pytest

from conftest import ROOT

PAGE = os.path.join(ROOT, "docs", "rollout-engines.md")

OUTPUTS = ("bench_generate_h100.txt", "bench_rollout_cpu.txt")


@pytest.mark.parametrize("name", OUTPUTS)
def test_page_quotes_every_row_of_the_committed_benchmark_output(name):
    with open(os.path.join(ROOT, "docs", "rollout", name)) as handle:
        rows = [line.strip() for line in handle if line.startswith("| ") and "---" not in line]
    with open(PAGE) as handle:
        page = handle.read()
    assert len(rows) >= 4
    for row in rows:
        assert row in page, row
    assert f"docs/rollout/{name}" in page  # the command's output, named as in the repository


def test_page_quotes_the_smollm2_step_comparison():
    with open(os.path.join(ROOT, "docs", "rollout", "smollm2_step_cpu.txt")) as handle:
        lines = [line for line in handle if not line.startswith("#")]
    with open(PAGE) as handle:
        page = " ".join(handle.read().split())
    hf, vllm, gap = lines
    assert hf.split("cpu ")[1].split()[0] in page and vllm.split("cpu ")[1].split()[0] in page
    assert gap.split(": ")[1].strip() in page


def test_page_speed_sentences_are_the_committed_tables_medians():
    """The sentences under the CPU speed table quote its medians (rounded to 2 digits): engine / bare per shape,
    HF / engine and HF / bare at 32 x 64 and 64 x 128."""
    with open(os.path.join(ROOT, "docs", "rollout", "bench_rollout_cpu.txt")) as handle:
        rows = [line.strip().strip("|").split("|") for line in handle if line.startswith("| ") and "---" not in line]
    header, body = [cell.strip() for cell in rows[0]], {row[0].strip(): row for row in rows[1:]}

    def median(shape: str, column: str) -> str:
        return f"{float(body[shape][header.index(column)].replace('*', '').split()[0]):.2f}"

    with open(PAGE) as handle:
        page = " ".join(handle.read().split())
    overhead = ", ".join(median(shape, "engine / bare, CPU") for shape in body)
    assert f"(engine / bare {overhead}:" in page
    assert (f"{median('32 x 64', 'HF / engine, CPU')}x faster than HF `generate` at 32 x 64 and "
            f"{median('64 x 128', 'HF / engine, CPU')}x at 64 x 128") in page
    assert (f"a bare `vllm.LLM` itself reaches {median('32 x 64', 'HF / bare, CPU')}x and "
            f"{median('64 x 128', 'HF / bare, CPU')}x") in page


def test_page_quotes_the_step_split_and_what_it_predicts():
    """The whole-step comparison's figures are the committed output's, and the predicted saving is its split's
    (generate saved minus the weight sync)."""
    with open(os.path.join(ROOT, "docs", "rollout", "smollm2_step_split_cpu.txt")) as handle:
        lines = [line.split() for line in handle if not line.startswith("#")]
    wall = {line[0]: float(line[4]) for line in lines if line and line[0] in ("hf", "vllm") and "[" in line[2]}
    split = {line[0]: [float(value) for value in line[1:]] for line in lines
             if line and line[0] in ("hf", "vllm") and "[" not in " ".join(line)}
    with open(PAGE) as handle:
        page = " ".join(handle.read().split())
    generate, sync, train = (split["hf"][0], split["vllm"][0]), split["vllm"][1], (split["hf"][4], split["vllm"][4])
    assert f"{wall['hf']:.3f} s wall with `hf`, {wall['vllm']:.3f} s with `vllm`" in page
    assert f"({generate[0]:.3f} s with `hf`, {generate[1]:.3f} s with `vllm`)" in page
    assert f"weight sync costs {sync:.3f} s" in page and f"({train[0]:.3f} s / {train[1]:.3f} s)" in page
    assert f"the split predicts {generate[0] - generate[1] - sync:.2f} s saved" in page
    assert f"the medians differ by {wall['hf'] - wall['vllm']:.2f} s" in page
