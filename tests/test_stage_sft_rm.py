"""Steps 1 and 2 end to end on the embedded synthetic default with the tiny Gemma (in-process, CPU)."""
from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from conftest import SFT_FLAGS, read_metrics
from dschat.cli.rm import main as rm_main
from dschat.cli.sft import main as sft_main


@pytest.fixture(scope="module")
def sft_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft")
    sft_main(SFT_FLAGS + ["--output_dir", str(out), "--max_steps", "40", "--eval_steps", "20"])
    return str(out)


def test_sft_lowers_loss_changes_every_parameter_and_saves_hf(sft_dir, tokenizer):
    records = read_metrics(sft_dir)
    losses = [r["sft/loss"] for r in records if "sft/loss" in r]
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5
    evals = [r["eval/loss"] for r in records if "eval/loss" in r]
    assert evals[-1] < evals[0]
    trained = AutoModelForCausalLM.from_pretrained(sft_dir)
    from dschat.utils.model import load_causal_lm

    initial = load_causal_lm("tiny-gemma", tokenizer, seed=1234)
    unchanged = [name for (name, a), (_, b) in zip(trained.named_parameters(), initial.named_parameters())
                 if torch.equal(a, b)]
    assert not unchanged, f"parameters not updated: {unchanged}"
    assert os.path.exists(os.path.join(sft_dir, "tensorboard"))


def test_reward_model_learns_the_preference_rule(sft_dir, tmp_path, tokenizer):
    out = tmp_path / "rm"
    final = rm_main(["--model_name_or_path", sft_dir, "--output_dir", str(out), "--max_seq_len", "64",
                     "--per_device_train_batch_size", "16", "--learning_rate", "5e-4", "--max_steps", "60",
                     "--max_eval_samples", "200", "--no_progress_bar", "--log_steps", "10"])
    records = read_metrics(str(out))
    first_accuracy = [r["eval/accuracy"] for r in records if "eval/accuracy" in r][0]
    assert final["accuracy"] >= 0.75, final
    assert final["accuracy"] > first_accuracy + 0.15
    model = AutoModelForSequenceClassification.from_pretrained(out)
    good = tokenizer(["Write a review of the lamp.\nReview: The lamp is lovely and the price was great."],
                     return_tensors="pt")
    bad = tokenizer(["Write a review of the lamp.\nReview: The lamp is awful and the price was terrible."],
                    return_tensors="pt")
    with torch.no_grad():
        assert model(**good).logits.item() > model(**bad).logits.item()


def test_interrupted_sft_resumes_with_the_same_data_order(tmp_path, monkeypatch):
    """Kill a run right after its step-4 checkpoint, resume it, and compare every later step's loss with an
    uninterrupted run of the same configuration."""
    flags = SFT_FLAGS + ["--max_steps", "8", "--save_steps", "4", "--max_train_samples", "400"]
    full = tmp_path / "full"
    sft_main(flags + ["--output_dir", str(full)])

    import dschat.utils.loop as loop

    real_save = loop.save_resumable

    def save_then_die(engine, output_dir, state, extra=None):
        real_save(engine, output_dir, state, extra)
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(loop, "save_resumable", save_then_die)
    interrupted = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        sft_main(flags + ["--output_dir", str(interrupted)])
    monkeypatch.setattr(loop, "save_resumable", real_save)
    sft_main(flags + ["--output_dir", str(interrupted), "--resume"])

    def losses(run):
        return {r["step"]: r["sft/loss"] for r in read_metrics(str(run)) if "sft/loss" in r}

    full_losses, resumed_losses = losses(full), losses(interrupted)
    assert sorted(resumed_losses) == list(range(1, 9))
    for step in range(5, 9):
        assert resumed_losses[step] == pytest.approx(full_losses[step], rel=1e-5, abs=1e-6), step


def test_lora_sft_trains_adapters_and_saves_a_merged_plain_checkpoint(tmp_path, tokenizer):
    final = sft_main(SFT_FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "6", "--lora_dim", "8",
                                  "--max_train_samples", "200"])
    assert final["loss"] > 0
    saved = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert not any("lora" in name for name, _ in saved.named_parameters())
    from dschat.utils.model import load_causal_lm

    initial = dict(load_causal_lm("tiny-gemma", tokenizer, seed=1234).named_parameters())
    changed = [name for name, param in saved.named_parameters() if not torch.equal(param, initial[name])]
    assert any("q_proj" in name for name in changed) and any("down_proj" in name for name in changed)
    assert not any("norm" in name for name in changed)  # LoRA leaves non-linear weights frozen
