"""ZeRO-3 in two CPU processes (gloo): SFT through torchrun, saving a loadable HF checkpoint."""
from __future__ import annotations

from transformers import AutoModelForCausalLM

from conftest import read_metrics, torchrun


def test_sft_zero3_two_processes(tmp_path):
    torchrun("training/step1_supervised_finetuning/main.py",
              ["--model_name_or_path", "tiny-gemma", "--zero_stage", "3", "--max_seq_len", "64",
               "--per_device_train_batch_size", "8", "--max_steps", "4", "--max_eval_samples", "32",
               "--learning_rate", "1e-3", "--output_dir", str(tmp_path), "--no_progress_bar", "--log_steps", "1"])
    losses = [r["sft/loss"] for r in read_metrics(str(tmp_path)) if "sft/loss" in r]
    assert len(losses) == 4
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert model.config.model_type == "gemma"
