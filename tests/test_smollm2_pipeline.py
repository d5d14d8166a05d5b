"""``scripts/reproduce/smollm2_cpu.sh`` shortened (2 steps per stage, 16 held-out rows): a real pretrained model
(SmolLM2-135M-Instruct: pad = eos = ``<|im_end|>``, bos ``<|im_start|>``, a ChatML template of its own, tied
embeddings) through SFT -> RM -> PPO and MA-PPO, and the conventions the tiny Gemma cannot show.
About 15 minutes on 2 busy cores (``-m slow``)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from conftest import ROOT, read_metrics
from dschat.data import load_pairs
from dschat.data.tokenized import LAYOUT_CHAT_TEMPLATE
from evaluation.pipeline_record import readme_table

SHORT = {"SFT_STEPS": "2", "RM_STEPS": "2", "PPO_STEPS": "2", "EVAL_STEPS": "1", "EVAL_SAMPLES": "16",
         "INTEROP_PAIRS": "16", "SEEDS": "1 2"}
RUNS = ("ppo-s1", "mappo-s1", "ppo-s2", "mappo-s2")
SAME_AS_PROJECT = ("plain", "plain_right", "plain_left", "trl_get_reward", "trl_grpo_chat", "trl_grpo_text_function")
"""rm_interop conventions that must score like the project (the others are documented misuses)."""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2")
    env = {**os.environ, **SHORT, "OUT": str(out), "DS_ACCELERATOR": "cpu"}
    result = subprocess.run(["bash", "scripts/reproduce/smollm2_cpu.sh"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return str(out)


@pytest.mark.slow
def test_script_records_every_figure_of_the_readme(run):
    sft_ppl = [r["eval/perplexity"] for r in read_metrics(os.path.join(run, "sft")) if "eval/perplexity" in r]
    rm_accuracy = [r["eval/accuracy"] for r in read_metrics(os.path.join(run, "rm")) if "eval/accuracy" in r]
    assert len(sft_ppl) == 2 and sft_ppl[1] < sft_ppl[0]  # before / after (two steps already lower it)
    assert len(rm_accuracy) == 2
    for name in RUNS:
        evals = [r for r in read_metrics(os.path.join(run, name)) if "eval/gold" in r]
        assert [r["step"] for r in evals] == [0, 1, 2] and all("eval/score" in r for r in evals)
    assert os.path.exists(os.path.join(run, "curves.png"))
    with open(os.path.join(run, "times.txt")) as handle:
        stages = [line.split()[0] for line in handle]
    assert stages == ["convert", "sft", "rm", "interop", *RUNS, "total"]
    with open(os.path.join(run, "record.json")) as handle:
        record = json.load(handle)
    assert list(record["stages"]) == ["sft", "rm", *RUNS]
    assert record["stages"]["rm"]["last"]["eval/accuracy"] == rm_accuracy[-1]
    assert "| mappo − ppo, paired by seed (2) |" in "\n".join(readme_table(record))


@pytest.mark.slow
def test_reward_model_scores_at_the_final_eos_like_plain_transformers_and_trl(run):
    """pad = eos in the base tokenizer: the saved RM has a pad of its own (HF's pooling then reads the final
    eos) and the layout's chat template (TRL's conversational GRPO call then scores the trained sequence)."""
    with open(os.path.join(run, "interop.txt")) as handle:
        report = json.loads([line for line in handle if line.startswith("{")][-1])  # then the timing line
    for name in SAME_AS_PROJECT:
        assert report[name]["agreement"] >= 0.99 and report[name]["max_abs_diff"] < 1e-4, (name, report[name])
    rm_dir = os.path.join(run, "rm")
    tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    assert AutoConfig.from_pretrained(rm_dir).pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer("x")["input_ids"][-1] == tokenizer.eos_token_id


@pytest.mark.slow
def test_policies_keep_the_bos_layout_template_tied_lm_head_and_stop_at_eos(run):
    for path in (os.path.join(run, "sft"), os.path.join(run, "ppo-s1", "actor"), os.path.join(run, "mappo-s2", "actor")):
        tokenizer = AutoTokenizer.from_pretrained(path)
        assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
        assert tokenizer.pad_token_id not in (tokenizer.eos_token_id, tokenizer.bos_token_id)
        assert tokenizer.chat_template == LAYOUT_CHAT_TEMPLATE
        assert tokenizer("Review:")["input_ids"][0] == tokenizer.bos_token_id
        config = AutoConfig.from_pretrained(path)
        assert config.tie_word_embeddings and config.dtype in ("float32", torch.float32)
        with safe_open(os.path.join(path, "model.safetensors"), "pt") as weights:
            assert "lm_head.weight" not in weights.keys()  # stored once, as the embedding
        model = AutoModelForCausalLM.from_pretrained(path)
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
        assert model.dtype == torch.float32
    # plain transformers, no ids passed: the saved generation config stops at <|im_end|> and pads with <pad>
    generation = model.generation_config
    assert (generation.eos_token_id, generation.pad_token_id) == (tokenizer.eos_token_id, tokenizer.pad_token_id)
    tokenizer.padding_side = "left"
    batch = tokenizer([pair.prompt for pair in load_pairs("synthetic", "validation")[:8]], padding=True,
                      return_tensors="pt")
    torch.manual_seed(0)
    with torch.no_grad():
        seq = model.generate(**batch, max_new_tokens=24, do_sample=True)
    for row in seq[:, batch["input_ids"].shape[1]:].tolist():
        if tokenizer.eos_token_id in row:  # nothing but padding after the first eos
            assert set(row[row.index(tokenizer.eos_token_id) + 1:]) <= {tokenizer.pad_token_id}
