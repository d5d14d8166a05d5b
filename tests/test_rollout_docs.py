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


def test_readme_quotes_the_weight_path_measurement():
    """The README's account of what vLLM's CPU build does with new weights quotes the committed output of
    ``scripts/benchmarks/vllm_weight_paths.py``: per path and model, its log-prob gaps, sync seconds and memory."""
    with open(os.path.join(ROOT, "docs", "rollout", "vllm_weight_paths_cpu.txt")) as handle:
        text = handle.read()
    tables = {block.split("--model ")[1].split()[0]: block for block in text.split("# $ ")[1:]}

    def cells(model: str, path: str) -> list:
        line = next(line for line in tables[model].splitlines() if line.startswith(f"| {path} |"))
        return [cell.strip() for cell in line.strip("|").split("|")]

    def gaps(model: str, path: str) -> list:
        return [float(part.split("log-prob gap ")[1].split(";")[0]) for part in cells(model, path)[1].split("weights:")[1:]]

    with open(PAGE) as handle:
        readme = " ".join(handle.read().split())
    assert "`docs/rollout/vllm_weight_paths_cpu.txt`" in readme and "scripts/benchmarks/vllm_weight_paths.py" in readme
    smol, tiny = "smollm2-135m-instruct", "tiny-gemma"
    new, first = gaps(smol, "load")
    assert f"log-prob gap {first:.2f} to them, {new:.1f} to the new ones" in readme
    new, first = gaps(smol, "reload")
    assert f"log-prob gap {new:.1f} and {first:.0f}; tiny Gemma {gaps(tiny, 'reload')[0]:.1f} and " \
           f"{gaps(tiny, 'reload')[1]:.1f})" in readme
    assert all(gap != gap for gap in gaps(smol, "reload-split") + gaps(tiny, "reload-split"))  # NaN
    assert gaps(smol, "repack")[0] == gaps(smol, "repack-split")[0]
    assert f"log-probs within {gaps(smol, 'repack')[0]:.1e} (SmolLM2) / {gaps(tiny, 'repack')[0]:.1e}" in readme
    repack, reload = cells(smol, "repack"), cells(smol, "reload")
    assert f"{float(repack[2].split()[0]):.2f} s per sync against {float(reload[2].split()[0]):.2f} s" in readme
    built = float(repack[3]), float(reload[3])
    assert f"{built[0] - built[1]:.0f} MiB more resident memory ({built[0]:.0f} against {built[1]:.0f} MiB" in readme


def test_readme_quotes_the_rollout_rerun_and_its_machine():
    """The 32 x 64 rerun names its machine, and the README quotes its HF / engine and engine / bare medians."""
    with open(os.path.join(ROOT, "docs", "rollout", "bench_rollout_cpu_32x64.txt")) as handle:
        lines = handle.read().splitlines()
    assert any(line.startswith("machine: ") and "(AVX512)" in line for line in lines)
    rows = [line.strip().strip("|").split("|") for line in lines if line.startswith("| ") and "---" not in line]
    header, row = [cell.strip() for cell in rows[0]], [cell.strip().replace("*", "") for cell in rows[1]]
    with open(PAGE) as handle:
        readme = " ".join(handle.read().split())
    hf_engine, engine_bare = row[header.index("HF / engine, CPU")], row[header.index("engine / bare, CPU")]
    assert f"gave HF / engine {hf_engine} and engine / bare {engine_bare.split()[0]}" in readme
    assert "`docs/rollout/bench_rollout_cpu_32x64.txt`" in readme
