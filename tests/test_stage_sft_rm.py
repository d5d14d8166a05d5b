"""Steps 1 and 2 end to end on the embedded synthetic default with the tiny Gemma (in-process, CPU)."""
from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from conftest import SFT_FLAGS, read_metrics
from dschat.cli.rm import main as rm_main
from dschat.cli.sft import main as sft_main
from dschat.data import PairDataset, PromptDataset, load_pairs
from evaluation.rm_interop import ranking_report


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
    from dschat.model import load_causal_lm

    initial = load_causal_lm("tiny-gemma", tokenizer, seed=1234)
    unchanged = [name for (name, a), (_, b) in zip(trained.named_parameters(), initial.named_parameters())
                 if torch.equal(a, b)]
    assert not unchanged, f"parameters not updated: {unchanged}"
    assert os.path.exists(os.path.join(sft_dir, "tensorboard"))


@pytest.fixture(scope="module")
def rm_run(sft_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("rm")
    final = rm_main(["--model_name_or_path", sft_dir, "--output_dir", str(out), "--max_seq_len", "64",
                     "--per_device_train_batch_size", "16", "--learning_rate", "5e-4", "--max_steps", "60",
                     "--max_eval_samples", "200", "--no_progress_bar", "--log_steps", "10"])
    return str(out), final


def test_reward_model_learns_the_preference_rule(rm_run):
    out, final = rm_run
    records = read_metrics(out)
    first_accuracy = [r["eval/accuracy"] for r in records if "eval/accuracy" in r][0]
    assert final["accuracy"] >= 0.75, final
    assert final["accuracy"] > first_accuracy + 0.15


def test_trained_reward_model_scores_the_same_under_plain_transformers_and_trl(rm_run):
    """The saved RM on the 200 held-out pairs step 2 evaluates: a plain tokenizer call (alone, or batched with
    either padding side), TRL's get_reward, TRL's GRPO call on conversational data and plain-text GRPO through
    text_reward_function give the project's scores (to float noise), hence its ranking, well above chance."""
    out, final = rm_run
    pairs = load_pairs("synthetic", split="validation")[:200]
    conventions = ("plain", "plain_right", "plain_left", "trl_get_reward", "trl_grpo_chat", "trl_grpo_text_function")
    report = ranking_report(out, pairs, conventions, max_seq_len=64)
    assert report["project"]["accuracy"] == pytest.approx(final["accuracy"])
    assert report["project"]["accuracy"] >= 0.75
    for name, row in report.items():
        assert row["max_abs_diff"] < 1e-4, (name, row)
        assert row["agreement"] >= 0.99 and abs(row["accuracy"] - report["project"]["accuracy"]) <= 0.01, (name, row)


def test_saved_tokenizers_plain_call_gives_the_trained_layout(sft_dir, rm_run):
    """The RM's tokenizer adds bos and eos (the sequence it scores, as PairDataset builds it), the SFT model's
    adds bos only (a prompt to continue, as PromptDataset builds it); both configs know the pad id."""
    pairs = load_pairs("synthetic", split="validation")[:20]
    reward_tokenizer, policy_tokenizer = AutoTokenizer.from_pretrained(rm_run[0]), AutoTokenizer.from_pretrained(sft_dir)
    dataset = PairDataset(pairs, reward_tokenizer, 64)
    prompts = PromptDataset([pair.prompt for pair in pairs], policy_tokenizer, 64)
    for index, pair in enumerate(pairs):
        assert reward_tokenizer(pair.prompt + pair.chosen)["input_ids"] == dataset[index]["chosen_input_ids"].tolist()
        assert policy_tokenizer(pair.prompt)["input_ids"] == prompts[index]["input_ids"].tolist()
    assert policy_tokenizer(pairs[0].prompt)["input_ids"][-1] != policy_tokenizer.eos_token_id
    for path, tokenizer in ((rm_run[0], reward_tokenizer), (sft_dir, policy_tokenizer)):
        assert AutoConfig.from_pretrained(path).pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id


def test_interrupted_sft_resumes_with_the_same_data_order(tmp_path, monkeypatch):
    """Kill a run right after its step-4 checkpoint, resume it, and compare every later step's loss with an
    uninterrupted run of the same configuration."""
    flags = SFT_FLAGS + ["--max_steps", "8", "--save_steps", "4", "--max_train_samples", "400"]
    full = tmp_path / "full"
    sft_main(flags + ["--output_dir", str(full)])

    import dschat.training.loop as loop

    real_save = loop.save_checkpoint

    def save_then_die(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)
    interrupted = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        sft_main(flags + ["--output_dir", str(interrupted)])
    monkeypatch.setattr(loop, "save_checkpoint", real_save)
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
    from dschat.model import load_causal_lm

    initial = dict(load_causal_lm("tiny-gemma", tokenizer, seed=1234).named_parameters())
    changed = [name for name, param in saved.named_parameters() if not torch.equal(param, initial[name])]
    assert any("q_proj" in name for name in changed) and any("down_proj" in name for name in changed)
    assert not any("norm" in name for name in changed)  # LoRA leaves non-linear weights frozen
