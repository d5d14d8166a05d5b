"""No update on, checkpoint of, or saved model with non-finite values (issue 11, faults 3 and 4): NaN/inf
rewards are counted and dropped (or stop the run, by flag), a non-finite loss stops the run with one line
naming the step while the last good checkpoint stays `latest`, and a reward model without a trained score head
is refused."""
from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file

from conftest import SFT_FLAGS, read_metrics
from dschat.cli.ppo import main as ppo_main
from dschat.cli.rm import main as rm_main
from dschat.cli.sft import main as sft_main

from dschat.rlhf.reward_sources import ModelReward
from dschat.utils.faults import RunStopped
from dschat.utils.model import ModelLoadError, load_causal_lm, load_reward_model

TINY_PPO = ["--actor_model_name_or_path", "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
            "--max_prompt_seq_len", "32", "--max_answer_seq_len", "8", "--per_device_generation_batch_size", "4",
            "--per_device_training_batch_size", "4", "--max_eval_samples", "4", "--num_warmup_steps", "0",
            "--no_progress_bar", "--log_samples", "0", "--actor_learning_rate", "1e-3"]


def _all_finite(directory) -> bool:
    weights = load_file(os.path.join(directory, "model.safetensors"))
    return all(torch.isfinite(t).all() for t in weights.values())


def _checkpoint_weights_finite(step_dir) -> bool:
    for root, _, files in os.walk(step_dir):
        for name in files:
            if name.endswith("model_states.pt"):
                module = torch.load(os.path.join(root, name), weights_only=False)["module"]
                if not all(torch.isfinite(t).all() for t in module.values()):
                    return False
    return True


@pytest.fixture
def broken_rewards(monkeypatch):
    """The reward model returns NaN for row 0 and +inf for row 1 of every batch."""
    real_call = ModelReward.__call__

    def call(self, seq, attention_mask, responses, meta):
        scores, counts = real_call(self, seq, attention_mask, responses, meta)
        scores = scores.clone()
        scores[0], scores[1] = float("nan"), float("inf")
        return scores, counts

    monkeypatch.setattr(ModelReward, "__call__", call)


def test_nonfinite_rewards_are_counted_and_dropped(tmp_path, broken_rewards):
    ppo_main(TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "2", "--save_steps", "1"])
    train = [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]
    assert [r["reward/nonfinite"] for r in train] == [2.0, 2.0]
    for record in train:
        assert all(torch.isfinite(torch.tensor(v)) for k, v in record.items() if not k.startswith("eval/"))
    assert _all_finite(tmp_path / "actor") and _all_finite(tmp_path / "critic")
    assert _checkpoint_weights_finite(tmp_path / "checkpoints" / "step1")


def test_nonfinite_rewards_stop_the_run_by_flag(tmp_path, broken_rewards):
    with pytest.raises(RunStopped, match=r"^step 1: 2 non-finite reward\(s\)"):
        ppo_main(TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "2", "--nonfinite_rewards", "stop"])
    assert not os.path.exists(tmp_path / "actor" / "model.safetensors")


def test_nonfinite_policy_loss_stops_and_latest_stays_good(tmp_path, monkeypatch):
    """A NaN policy loss at step 2: one line naming step 2, nothing updated or saved, step 1 stays latest."""
    trainer_globals = ppo_main.__globals__["PPOTrainer"].train_on_experience.__globals__
    real_loss = trainer_globals["policy_loss"]
    calls = []

    def loss_nan_at_step_2(*args, **kwargs):
        loss, stats = real_loss(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 2 else loss), stats

    monkeypatch.setitem(trainer_globals, "policy_loss", loss_nan_at_step_2)
    with pytest.raises(RunStopped) as caught:
        ppo_main(TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "3", "--save_steps", "1"])
    message = str(caught.value)
    assert message.startswith("step 2: non-finite policy loss") and "\n" not in message
    assert message.endswith("(a lower learning rate may help)") and "checkpoints/step1" in message
    assert open(tmp_path / "checkpoints" / "latest").read() == "step1"
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["latest", "step1"]
    assert _checkpoint_weights_finite(tmp_path / "checkpoints" / "step1")
    assert not os.path.exists(tmp_path / "actor" / "model.safetensors")


@pytest.mark.parametrize("stage", ["sft", "rm"])
def test_huge_learning_rate_stops_with_one_line_and_writes_no_nan_model(tmp_path, stage):
    """SFT / RM at learning rate 1e6: the run stops naming the step; no HF model is written, and every
    checkpoint on disk is finite."""
    flags = SFT_FLAGS + ["--max_steps", "30", "--save_steps", "1", "--max_train_samples", "800",
                         "--output_dir", str(tmp_path)]
    flags[flags.index("--learning_rate") + 1] = "1e6"
    main = sft_main if stage == "sft" else rm_main
    with pytest.raises(RunStopped, match=r"^step \d+: .*non-finite ") as caught:
        main(flags)
    assert "\n" not in str(caught.value)
    assert not os.path.exists(tmp_path / "model.safetensors")
    for name in os.listdir(tmp_path / "checkpoints"):
        if name.startswith("step"):
            assert _checkpoint_weights_finite(tmp_path / "checkpoints" / name), name
    assert not any(name.endswith(".partial") for name in os.listdir(tmp_path / "checkpoints"))


def test_causal_lm_as_reward_model_is_refused(tmp_path, tokenizer):
    """A causal LM has no score head: loading it as the reward model would train against a random head."""
    lm_dir = tmp_path / "lm"
    load_causal_lm("tiny-gemma", tokenizer).save_pretrained(lm_dir)
    tokenizer.save_pretrained(lm_dir)
    with pytest.raises(ModelLoadError, match=f"{lm_dir}: the checkpoint has no score head"):
        load_reward_model(str(lm_dir), tokenizer, require_head=True)
    load_reward_model(str(lm_dir), tokenizer)  # step 2 starts its head from scratch on purpose
    with pytest.raises(ModelLoadError, match=str(lm_dir)):
        ppo_main(TINY_PPO + ["--output_dir", str(tmp_path / "ppo"), "--reward_model_name_or_path", str(lm_dir),
                             "--max_steps", "1"])
    trained = tmp_path / "rm"
    rm = load_reward_model(str(lm_dir), tokenizer)
    rm.save_pretrained(trained)
    reloaded = load_reward_model(str(trained), tokenizer, require_head=True)
    assert torch.equal(reloaded.score.weight, rm.score.weight)
