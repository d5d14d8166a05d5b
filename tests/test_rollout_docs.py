"""The README's rollout-engine figures are the committed outputs of the benchmark commands it names (issue 30)."""
from __future__ import annotations

import os

import pytest

from conftest import ROOT

OUTPUTS = ("bench_generate_h100.txt", "bench_rollout_cpu.txt")


@pytest.mark.parametrize("name", OUTPUTS)
def test_readme_quotes_every_row_of_the_committed_benchmark_output(name):
    with open(os.path.join(ROOT, "docs", "rollout", name)) as handle:
        rows = [line.strip() for line in handle if line.startswith("| ") and "---" not in line]
    with open(os.path.join(ROOT, "README.md")) as handle:
        readme = handle.read()
    assert len(rows) >= 4
    for row in rows:
        assert row in readme, row
    assert f"docs/rollout/{name}" in readme


def test_readme_quotes_the_smollm2_step_comparison():
    with open(os.path.join(ROOT, "docs", "rollout", "smollm2_step_cpu.txt")) as handle:
        lines = [line for line in handle if not line.startswith("#")]
    with open(os.path.join(ROOT, "README.md")) as handle:
        readme = " ".join(handle.read().split())
    hf, vllm, gap = lines
    assert hf.split("cpu ")[1].split()[0] in readme and vllm.split("cpu ")[1].split()[0] in readme
    assert gap.split(": ")[1].strip() in readme
