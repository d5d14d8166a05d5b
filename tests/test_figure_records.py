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


def test_the_memory_plan_pages_prose_figures_are_the_plans_today():
    """The figures docs/memory_plan.md states in prose, from the plan of the configs they name (the table and the
    sample output are checked whole by tests/test_memory_plan.py)."""
    def peak(config: str, n: int, *flags: str) -> float:
        return plan.make_plan(os.path.join(ROOT, "configs", config), n, overrides=flags).peak / GIB

    dpo_offload = plan.make_plan(os.path.join(ROOT, "configs/dpo/gemma2-27b/tldr.yaml"), 8, overrides=("--offload",))
    step3 = step3_plan()
    full = plan.make_plan(os.path.join(ROOT, "configs/ppo/gemma-2b/tldr.yaml"), 1, overrides=(
        "--data_name", "synthetic", "--global_batch_size", "16", "--max_prompt_seq_len", "32", "--rollout_engine", "hf",
        "--offload", "--actor_lora_dim", "0", "--critic_lora_dim", "0"))
    assert step3.roles[0].trainable < full.roles[0].trainable  # the same run without LoRA
    no_gather = peak("ppo/gemma-7b/tldr.yaml", 8, "--rollout_engine", "hf", "--no_gather_for_generation")
    text = page("memory_plan.md")
    for phrase in (f"({peak('dpo/gemma2-27b/tldr.yaml', 8):.1f} GiB on 8: policy states",
                   f"`--offload` ({dpo_offload.peak / GIB:.1f} GiB per GPU, optimizer in host memory: "
                   f"~{5 * round(dpo_offload.host / GIB / 5)} GiB of host RAM per GPU process)",
                   f"({peak('ppo/gemma-7b/tldr.yaml', 8, '--rollout_engine', 'hf'):.1f} GiB of 80",
                   f"`--no_gather_for_generation` ({no_gather:.1f} GiB on 8)",
                   f"fits on 8 ({peak('ppo/gemma-7b/tldr.yaml', 8):.1f} GiB + the reserve",
                   f"now {peak('ppo/gemma2-27b/tldr.yaml', 8, '--rollout_engine', 'hf'):.1f})",
                   f"(plan {full.peak / GIB:.1f} GiB on the GPU, {full.host / GIB:.1f} GiB of host memory)"):
        assert phrase in text, phrase


def test_the_h100_speed_and_run_figures_are_the_record_and_agree_with_each_other():
    measured = record(H100)
    speed, run = measured["per_term"]["speed"], measured["step3"]["run"]
    text = page("memory_plan.md")
    rollout, step = speed["rollout_8x512_s"], speed["actor_step_2x1024_s"]
    assert (f"takes {rollout[0]:.2f} s [{rollout[1]:.2f}, {rollout[2]:.2f}] ({speed['rollout_tokens_per_s']} rollout "
            "tokens/s)") in text
    assert (f"takes {step[0]:.3f} s [{step[1]:.3f}, {step[2]:.3f}] ({speed['actor_step_tokens_per_s'] / 1000:.1f}k "
            f"tokens/s); peak allocated {speed['peak_allocated_gib']:.2f} GiB") in text
    assert abs(8 * 512 / rollout[0] - speed["rollout_tokens_per_s"]) < 1  # the rates are the times' (rounded)
    fastest, slowest = 2 * 1024 / (step[0] - 0.0005), 2 * 1024 / (step[0] + 0.0005)  # the time's rounding
    assert slowest - 50 <= speed["actor_step_tokens_per_s"] <= fastest + 50  # and the rate's (18.7k: +-50)
    assert (f"cut into {run['macros_per_response']} macros of {run['macro_length_mean']:.2f} tokens on average" in text
            and f"took {run['wall_s']} s" in text)
    assert round(run["response_tokens"] / run["macro_length_mean"]) == run["macros_per_response"]
