"""The memory plan: its formulas against hand arithmetic, DeepSpeed's own estimators, the Gemma report's
parameter counts and what autograd really saves; the CLI on a real config; bad input; the docs table."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, child_env, one_line_error
from dschat.cli import plan as plan_cli
from dschat.training.memory_plan import ModelShape, layer_bytes_per_token, model_states

sys.path.insert(0, os.path.join(ROOT, "scripts", "benchmarks"))

SMALL = ModelShape(params=1000, largest_layer=100, lora_features=50, head_params=0, hidden=8, intermediate=32,
                   layers=2, q_dim=8, kv_dim=4, head_dim=4, vocab=16)


def test_states_by_hand():
    """Ψ = 1000 on 4 processes, by hand: bf16 ZeRO-2 = 2Ψ params, (2 + 4)Ψ/4 gradients (16-bit and fp32
    partitions), (4 + 8)Ψ/4 optimizer (fp32 master, Adam m and v); fp32 without ZeRO = torch AdamW: 4Ψ + 4Ψ + 8Ψ;
    ZeRO-3 frozen = 2Ψ/4 + the gathered 100-parameter layer at 4 bytes; LoRA rank 2 trains 2 x 50 parameters."""
    zero2 = model_states(SMALL, dtype="bf16", zero_stage=2, world_size=4, trained=True)
    assert (zero2.params, zero2.gradients, zero2.optimizer) == (2000, 1500, 3000)
    plain = model_states(SMALL, dtype="fp32", zero_stage=0, world_size=4, trained=True)
    assert (plain.params, plain.gradients, plain.optimizer) == (4000, 4000, 8000)
    frozen = model_states(SMALL, dtype="bf16", zero_stage=3, world_size=4, trained=False)
    assert (frozen.params, frozen.gathered, frozen.gradients, frozen.optimizer) == (500, 400, 0, 0)
    lora = model_states(SMALL, dtype="bf16", zero_stage=0, world_size=4, trained=True, lora_dim=2)
    assert (lora.params, lora.gradients, lora.optimizer) == (2000, 100 * 6, 100 * 12)
    offload = model_states(SMALL, dtype="bf16", zero_stage=2, world_size=4, trained=True, offload=True)
    assert (offload.device, offload.host) == (2000, 16 * 1000 / 4)


@pytest.mark.parametrize("world_size", [1, 8, 16])
def test_states_match_deepspeed_estimators(world_size):
    """DeepSpeed's own formulas (which take parameter counts): ZeRO-2 equal; ZeRO-3 equal with offload, and 2Ψ/N
    above it without (we count the fp32 gradient of the step, see the module docstring)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    shape = plan_cli.model_shape("gemma-7b")
    psi, layer, n = shape.params, shape.largest_layer, world_size

    def ours(stage, **flags):
        return model_states(shape, dtype="bf16", zero_stage=stage, world_size=n, trained=True, **flags).device

    for offload in (False, True):
        _, gpu = estimate_zero2_model_states_mem_needs(psi, num_gpus_per_node=n, cpu_offload=offload)
        assert ours(2, offload=offload) == pytest.approx(gpu, abs=1)
    _, gpu, _ = estimate_zero3_model_states_mem_needs(psi, layer, num_gpus_per_node=n, cpu_offload=False)
    assert ours(3) == pytest.approx(gpu + 2 * psi / n, abs=1)
    _, gpu, _ = estimate_zero3_model_states_mem_needs(psi, layer, num_gpus_per_node=n, cpu_offload=True,
                                                      cpu_offload_params=False)
    assert ours(3, offload=True) == pytest.approx(gpu, abs=1)
    _, gpu, _ = estimate_zero3_model_states_mem_needs(psi, layer, num_gpus_per_node=n, cpu_offload=True,
                                                      cpu_offload_params=True)
    assert ours(3, offload=True, offload_params=True) == pytest.approx(gpu, abs=1)


def test_parameter_counts_match_the_gemma_report():
    """Non-embedding parameters of Gemma 2B and 7B (Gemma report, Table 2), counted on the meta device from the
    configs' dimensions; the embedding is 256000 x hidden (tied), the largest layer."""
    for name, hidden, non_embedding in (("gemma-2b", 2048, 1_981_884_416), ("gemma-7b", 3072, 7_751_248_896)):
        shape = plan_cli.model_shape(name)
        assert shape.params - 256000 * hidden == non_embedding
        assert shape.largest_layer == 256000 * hidden


def test_tiny_gemma_counts_like_the_built_model(tokenizer):
    from dschat.model.tiny import build_tiny_gemma

    assert plan_cli.model_shape("tiny-gemma").params == sum(p.numel() for p in build_tiny_gemma(tokenizer).parameters())


LLAMA = dict(model_type="llama", vocab_size=500, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)


@pytest.mark.parametrize("config", [*sorted(plan_cli.KNOWN_MODELS), "tiny-gemma", "llama", "qwen2"])
def test_torch_free_shape_counts_like_transformers_on_the_meta_device(config):
    """The plan counts each model from its config's numbers alone; transformers' models built on the meta device
    from the same numbers (both heads) must have exactly those parameters, largest module, LoRA widths and head."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    from dschat.training.memory_plan import decoder_shape

    dims = {"llama": LLAMA, "qwen2": {**LLAMA, "model_type": "qwen2", "tie_word_embeddings": True}}.get(config)
    dims = dict(dims or plan_cli.model_dims(config))
    for head, auto in (("lm", AutoModelForCausalLM), ("score", AutoModelForSequenceClassification)):
        values = dict(dims)
        hf = AutoConfig.for_model(values.pop("model_type"), **values, num_labels=1)
        with torch.device("meta"):
            model = auto.from_config(hf)
        output = "lm_head" if head == "lm" else "score"
        shape = decoder_shape(dims, head)
        assert shape.params == sum(p.numel() for p in model.parameters())
        assert shape.largest_layer == max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
        assert shape.lora_features == sum(m.in_features + m.out_features for n, m in model.named_modules()
                                          if isinstance(m, torch.nn.Linear) and not n.endswith(output))
        assert shape.head_params == (0 if head == "lm" else sum(p.numel() for p in model.score.parameters()))


def test_the_plan_answers_in_a_second_without_torch_or_deepspeed(tmp_path):
    """``python -m dschat.cli.plan`` on a launcher's config (vLLM engine, four models) imports neither."""
    code = ("import sys\nfrom dschat.cli import plan\nplan.main(['configs/ppo/gemma-7b/tldr.yaml', '--num_gpus', '8'])\n"
            "print(sorted({'torch', 'deepspeed', 'transformers'} & set(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env={**child_env(), "PYTHONPATH": ROOT}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"
    assert "peak per GPU" in result.stdout


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_layer_bytes_match_what_autograd_saves(dtype):
    """One decoder layer's saved activations, measured with saved_tensors_hooks as the difference between a 2- and
    a 1-layer Gemma (parameters excluded), within 5% of the formula."""
    from transformers import GemmaConfig, GemmaForCausalLM

    def saved_bytes(layers):
        config = GemmaConfig(vocab_size=64, hidden_size=64, intermediate_size=256, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16)
        model = GemmaForCausalLM(config).to(torch.float32 if dtype == "fp32" else torch.bfloat16)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen = {}

        def pack(tensor):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in params:
                seen[storage.data_ptr()] = storage.nbytes()
            return tensor

        ids = torch.randint(0, 64, (2, 48))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model(input_ids=ids, use_cache=False)
        return sum(seen.values())

    shape = ModelShape(params=0, largest_layer=0, lora_features=0, head_params=0, hidden=64, intermediate=256,
                       layers=1, q_dim=64, kv_dim=32, head_dim=16, vocab=64)
    measured = (saved_bytes(2) - saved_bytes(1)) / (2 * 48)
    assert layer_bytes_per_token(shape, dtype) == pytest.approx(measured, rel=0.05)


def test_cli_on_a_real_config(capsys):
    """configs/sft/gemma-2b/tldr.yaml on 8 GPUs: ZeRO-2 bf16 states 2Ψ + 18Ψ/8, Table 5's global batch 512 split
    into micro batches of 8 (launch.sh's NUM_GPUS rule), 1024-token sequences; the report says whether it fits."""
    plan_cli.main([os.path.join(ROOT, "configs/sft/gemma-2b/tldr.yaml"), "--num_gpus", "8"])
    out = capsys.readouterr().out
    psi = plan_cli.model_shape("gemma-2b").params
    plan = plan_cli.make_plan(os.path.join(ROOT, "configs/sft/gemma-2b/tldr.yaml"), 8)
    assert plan.states == pytest.approx(2 * psi + 18 * psi / 8)
    assert "train: 8 x 1024 tokens" in out and "policy" in out and "gemma-2b" in out
    assert plan.peak + 3 * 2 ** 30 <= 80 * 2 ** 30  # the 3 GiB reserve
    assert f"peak per GPU {plan.peak / 2 ** 30:.2f} GiB + 3 GiB reserve: within 80 GiB" in out
    assert out.rstrip().endswith("verdict on 8 GPU(s): fits")


def exit_status(main, argv) -> int:
    """``main(argv)``'s exit status: 0 when it returns."""
    try:
        main(argv)
    except SystemExit as exit_info:
        return exit_info.code
    return 0


def test_the_reserve_turns_a_plan_at_the_edge_into_does_not_fit(capsys):
    """PPO Gemma 7B on 8 GPUs with the HF rollout engine peaks at 79.09 of 80 GiB: with the CUDA context and
    fragmentation it does not fit; with no reserve it would."""
    path = os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml")
    plan = plan_cli.make_plan(path, 8, overrides=("--rollout_engine", "hf"))
    assert 77 * 2 ** 30 < plan.peak <= 80 * 2 ** 30
    assert exit_status(plan_cli.main, [path, "--num_gpus", "8", "--rollout_engine", "hf"]) == 1
    out = capsys.readouterr().out
    assert "+ 3 GiB reserve: EXCEEDS 80 GiB" in out and "verdict on 8 GPU(s): does NOT fit (GPU memory)" in out
    assert exit_status(plan_cli.main, [path, "--num_gpus", "8", "--reserve_gb", "0", "--rollout_engine", "hf"]) == 0
    out = capsys.readouterr().out
    assert "+ 0 GiB reserve: within 80 GiB" in out and "verdict on 8 GPU(s): fits" in out


def test_ppo_plan_has_the_four_models():
    plan = plan_cli.make_plan(os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml"), 16)
    assert [role.role for role in plan.roles] == ["actor", "reference", "critic", "reward model"]
    assert [role.zero_stage for role in plan.roles] == [3, 3, 3, 3]
    assert plan.phases[0][0].startswith("vLLM generate")  # the launchers' engine
    hf = plan_cli.make_plan(os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml"), 16,
                            overrides=("--rollout_engine", "hf"))
    assert hf.phases[0][0] == "generate: 16 x (512 + 512) tokens"  # 256 prompts over 16 GPUs


def test_ppo_plan_counts_the_vllm_engine():
    """With --rollout_engine vllm: generation takes the engine's share of the GPU, the sync its weights (1/TP, in
    the dtype) and one gathered group, the host its sleeping weights; the training phases are the HF plan's."""
    config = os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml")
    flags = ("--vllm_gpu_memory_utilization", "0.4", "--vllm_tensor_parallel_size", "2")
    plan = plan_cli.make_plan(config, 8, overrides=flags, gpu_memory_gib=40.0)
    hf = plan_cli.make_plan(config, 8, overrides=("--rollout_engine", "hf"), gpu_memory_gib=40.0)
    weights = 2 * plan.roles[0].shape.params / 2  # bf16, half of it per GPU
    phases = dict(plan.phases)
    assert phases["vLLM generate (0.4 of the GPU: weights + KV cache)"] == 0.4 * 40 * 2 ** 30
    assert phases["vLLM weight sync (its weights + one gathered group)"] == weights + 2 ** 29
    assert plan.host == pytest.approx(hf.host + weights)
    assert [p for p in plan.phases if p[0].startswith(("score", "train"))] == \
        [p for p in hf.phases if p[0].startswith(("score", "train"))]
    assert "must divide the 8 processes" in str(pytest.raises(
        plan_cli.ConfigError, plan_cli.make_plan, config, 8, overrides=("--vllm_tensor_parallel_size", "3")).value)


def test_bad_input_is_one_line(capsys):
    assert "no such config file" in one_line_error(plan_cli.main, ["configs/nope.yaml", "--num_gpus", "1"], capsys)
    assert "--num_gpus" in one_line_error(
        plan_cli.main, [os.path.join(ROOT, "configs/sft/gemma-2b/tldr.yaml"), "--num_gpus", "0"], capsys)
    assert "--global_batch_size 64 cannot be split over 3 processes" in one_line_error(
        plan_cli.main, [os.path.join(ROOT, "configs/rm/gemma-2b/tldr.yaml"), "--num_gpus", "3"], capsys)


def test_a_launcher_script_plans_its_config(capsys):
    flags = ["--num_gpus", "8", "--host_memory_gb", "4000"]
    plan_cli.main([os.path.join(ROOT, "scripts/step3_rlhf/gemma-7b_tldr_mappo.sh"), *flags])
    from_launcher = capsys.readouterr().out
    plan_cli.main([os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml"), *flags])
    assert from_launcher == capsys.readouterr().out and "peak per GPU" in from_launcher
    assert "not a launcher" in one_line_error(plan_cli.main, [os.path.join(ROOT, "scripts/test.sh"), *flags], capsys)


def test_a_plan_that_does_not_fit_names_the_smallest_gpu_count_that_does(capsys):
    """Gemma 7B PPO on 2 GPUs: too big; the answer is the first count whose peak + reserve fits 80 GiB."""
    config = os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml")
    assert exit_status(plan_cli.main, [config, "--num_gpus", "2", "--host_memory_gb", "4000"]) == 1
    out = capsys.readouterr().out
    first = next(n for n in plan_cli.SEARCH_GPUS
                 if plan_cli.make_plan(config, n).peak + 3 * 2 ** 30 <= 80 * 2 ** 30)
    assert f"the smallest GPU count that fits: {first} (80 GiB GPUs" in out and first == 8
    assert exit_status(plan_cli.main, [config, "--num_gpus", "8", "--host_memory_gb", "4000"]) == 0
    assert "smallest GPU count" not in capsys.readouterr().out  # it fits: nothing to search


def test_host_memory_is_judged_per_node(capsys):
    """Gemma-2 27B PPO offloads its optimizer states: 8 processes on a node hold 8 x the per-GPU host bytes."""
    config = os.path.join(ROOT, "configs/ppo/gemma2-27b/tldr.yaml")
    per_gpu = plan_cli.make_plan(config, 8).host
    assert exit_status(plan_cli.main, [config, "--num_gpus", "8", "--host_memory_gb", "500"]) == 1
    out = capsys.readouterr().out
    assert (f"host per node (8 GPU process(es)): {8 * per_gpu / 2 ** 30:.2f} GiB: EXCEEDS 500.0 GiB (stated: "
            "--host_memory_gb)") in out and 8 * per_gpu > 500 * 2 ** 30
    assert "verdict on 8 GPU(s): does NOT fit (host memory)" in out
    assert "no GPU count up to 64 fits" in out or "the smallest GPU count that fits: " in out
    assert exit_status(plan_cli.main, [config, "--num_gpus", "8", "--host_memory_gb", "2000", "--gpus_per_node",
                                       "4"]) == 0
    assert (f"(4 GPU process(es)): {4 * per_gpu / 2 ** 30:.2f} GiB: within 2000.0 GiB (stated: --host_memory_gb)"
            in capsys.readouterr().out)


def test_the_verdict_is_one_in_every_mode(capsys):
    """Gemma-7B PPO, verbatim as docs/launchers.md runs it, on a node of 100 GiB: the single config, the search
    and ``--table`` all judge host memory per node against the stated target node, say the same and exit 1;
    without the flag the default target node (1024 GiB, said so) is used, not this machine's memory."""
    config = os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml")
    made = plan_cli.make_plan(config, 8)
    assert 8 * made.host > 100 * 2 ** 30 and made.offloaded == 0  # vLLM's sleeping weights, not offload
    assert exit_status(plan_cli.main, [config, "--num_gpus", "8", "--host_memory_gb", "100"]) == 1
    out = capsys.readouterr().out
    assert f"host per GPU process: vLLM's sleeping weights {made.host / 2 ** 30:.2f} GiB\n" in out
    assert "verdict on 8 GPU(s): does NOT fit (host memory)" in out and "(the GPU counts that fit: above)" not in out
    found, _ = plan_cli.search(config, 80.0, host=plan_cli.Host(100.0))
    table = plan_cli.table(os.path.join(ROOT, "configs", "ppo"), 80.0, host=plan_cli.Host(100.0))
    row = next(line for line in table.splitlines() if "ppo/gemma-7b/tldr.yaml" in line)
    assert row.endswith(f"| {found or plan_cli.NO_FIT} |")
    assert (f"the smallest GPU count that fits: {found}" if found else "no GPU count up to 64 fits") in out
    assert exit_status(plan_cli.main, [config, "--num_gpus", "8"]) == 0
    assert "within 1024.0 GiB (--host_memory_gb's default 1024: a target node's, not this machine's)" in \
        capsys.readouterr().out


def test_a_count_the_config_cannot_run_on_is_one_line_and_the_counts_that_can(capsys):
    """The launchers' vLLM engine spans 4 GPUs for Gemma-2 27B: 2 GPUs is refused in the run's words, and the
    counts tried are listed with why."""
    config = os.path.join(ROOT, "configs/ppo/gemma2-27b/tldr.yaml")
    line = one_line_error(plan_cli.main, [config, "--num_gpus", "2", "--host_memory_gb", "100000"], capsys)
    assert "must divide the 2 processes" in line and line.endswith("(the counts tried are listed above)")


@pytest.fixture(scope="module")
def configs_table():
    return plan_cli.table(os.path.join(ROOT, "configs"), 80.0)


def test_docs_table_is_the_tools_output(configs_table):
    """docs/memory_plan.md's table is exactly ``python -m dschat.cli.plan configs --table`` today."""
    with open(os.path.join(ROOT, "docs", "memory_plan.md")) as handle:
        assert configs_table in handle.read()


def test_readme_summary_is_the_smallest_fit_of_every_task(configs_table):
    """The launchers page's per-model summary states, for each model and stage, the smallest fit the tool gives every
    task config of that model."""
    smallest = {}
    for row in configs_table.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        _, stage, model, _ = cells[0].split("/")
        smallest.setdefault((model, stage), set()).add(cells[-1])
    with open(os.path.join(ROOT, "docs", "launchers.md")) as handle:
        readme = handle.read()
    section = readme[readme.index("## Memory plan"):]
    models = {"Gemma 2B": "gemma-2b", "Gemma 7B": "gemma-7b", "Gemma-2 27B": "gemma2-27b",
              "CodeGemma 2B": "codegemma-2b", "CodeGemma 7B": "codegemma-7b"}
    stages = ("sft", "rm", "dpo", "ppo")
    checked = 0
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] not in models:
            continue
        for stage, cell in zip(stages, cells[1:]):
            expected = smallest.get((models[cells[0]], stage), {"–"})
            assert len(expected) == 1 and cell.split()[0] == expected.pop(), (cells[0], stage, cell)
            checked += 1
    assert checked == len(models) * len(stages)


def test_plan_is_within_a_quarter_of_real_stage_runs(tmp_path):
    """The plan's peak per process against the peak of live tensor bytes (``torch.profiler``; what
    ``max_memory_allocated`` reports on a GPU) of real one-process runs of the tiny Gemma through SFT, RM and PPO
    on fixed-length rows (``scripts/benchmarks/plan_vs_measured.py``'s cases)."""
    import plan_vs_measured as bench

    paths = bench.write_fixture(str(tmp_path / "data"))
    model, batch, _ = bench.MODELS["tiny"]
    ratios = {}
    for name, stage, flags in bench.cases(model, batch, 2, str(tmp_path), paths):
        if stage == "dpo":
            continue
        measured = bench.tensor_peak(f"dschat.cli.{stage}", flags, str(tmp_path / f"{stage}.json"), child_env())
        ratios[name] = plan_cli.make_plan(None, 1, stage=stage, overrides=tuple(flags)).peak / measured
    assert list(ratios) == ["tiny sft", "tiny rm", "tiny ppo"]
    assert all(0.75 <= ratio <= 1.25 for ratio in ratios.values()), ratios


def test_ppo_plan_counts_the_async_producer_in_host_memory():
    """--async_rollout K: the trainer's device generates no rollouts (evaluation still does), and the host holds the
    producer's actor, one pushed version and K + 1 rollouts of (prompt + new) positions at 16 bytes each."""
    config = os.path.join(ROOT, "configs/ppo/gemma-7b/tldr.yaml")
    hf = plan_cli.make_plan(config, 16, overrides=("--rollout_engine", "hf"))
    plan = plan_cli.make_plan(config, 16, overrides=("--rollout_engine", "hf", "--async_rollout", "2"))
    rows = 16  # 256 prompts over 16 GPUs, one sample each
    queued = 3 * rows * (512 + 512) * 16
    assert plan.host == pytest.approx(hf.host + 2 * 2 * plan.roles[0].shape.params + queued)  # bf16 weights
    assert [name for name, _ in plan.phases] == [name for name, _ in hf.phases[1:]]


def test_docs_sample_output_is_the_tools_output(capsys):
    """docs/memory_plan.md's ``$ .venv/bin/python -m dschat.cli.plan ...`` block is what that command prints."""
    with open(os.path.join(ROOT, "docs", "memory_plan.md")) as handle:
        page = handle.read()
    start = page.index("$ .venv/bin/python -m dschat.cli.plan ")
    block = page[start:page.index("```", start)].splitlines()
    argv = block[0].split()[4:]
    assert exit_status(plan_cli.main, [os.path.join(ROOT, argv[0]), *argv[1:]]) == 0
    assert capsys.readouterr().out.splitlines() == block[1:]
