"""No update on, checkpoint of, or saved model with non-finite values (issue 11, faults 3 and 4): NaN/inf
rewards are counted and dropped (or stop the run, by flag), a non-finite loss stops the run with one line
naming the step while the last good checkpoint stays `latest`, and a reward model without a trained score head
is refused."""
from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file

from conftest import SFT_FLAGS, TINY_PPO, one_line_error, read_metrics
from dschat.cli.ppo import main as ppo_main
from dschat.cli.rm import main as rm_main
from dschat.cli.sft import main as sft_main

from dschat.rlhf.reward_sources import ModelReward
from dschat.training.faults import RunStopped
from dschat.model import ModelLoadError, load_causal_lm, load_reward_model


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


@pytest.fixture
def nan_rewards(monkeypatch):
    """The reward model scores NaN everywhere at the training iterations in ``nan_rewards.at`` (default: always;
    the first call is the step-0 evaluation)."""
    real_call = ModelReward.__call__
    calls = []

    def call(self, seq, attention_mask, responses, meta):
        scores, counts = real_call(self, seq, attention_mask, responses, meta)
        calls.append(1)
        if call.at is None or len(calls) - 1 in call.at:
            scores = torch.full_like(scores, float("nan"))
        return scores, counts

    call.at = None
    monkeypatch.setattr(ModelReward, "__call__", call)
    return call


def test_a_step_that_dropped_every_sample_stops_the_run(tmp_path, nan_rewards, capsys):
    """A reward model that scores NaN everywhere (issue 24, fault 4): one line at step 1, exit 2, no model."""
    message = one_line_error(ppo_main, TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "3"], capsys)
    assert message.startswith("error: step 1: every sample's reward was non-finite (4 of 4 dropped)"), message
    assert message.endswith("(check the reward model or reward function)"), message
    assert not os.path.exists(tmp_path / "actor" / "model.safetensors")
    assert [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r] == []


def test_threshold_over_a_window_and_no_score_logged_for_a_step_without_one(tmp_path, nan_rewards):
    """--nonfinite_stop_window 2: iterations 2 and 4 alone lose every sample (half of their window: no stop)
    and their metrics rows carry no score; iteration 5 loses every sample too, fills the window and stops."""
    nan_rewards.at = {2, 4, 5}
    flags = TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "6", "--nonfinite_stop_window", "2",
                        "--nonfinite_stop_fraction", "1"]
    with pytest.raises(RunStopped, match=r"^step 5: 100% of the samples of the last 2 iterations had non-finite"):
        ppo_main(flags)
    train = {r["step"]: r for r in read_metrics(str(tmp_path)) if "reward/nonfinite" in r}
    assert sorted(train) == [1, 2, 3, 4]
    assert [train[step]["reward/nonfinite"] for step in (1, 2, 3, 4)] == [0.0, 4.0, 0.0, 4.0]
    for step, scored in ((1, True), (2, False), (3, True), (4, False)):
        assert ("objective/score" in train[step]) == scored and ("response/length" in train[step]) == scored


def test_nonfinite_policy_loss_stops_and_latest_stays_good(tmp_path, monkeypatch):
    """A NaN policy loss at step 2: one line naming step 2, nothing updated or saved, step 1 stays latest."""
    from dschat.rlhf.ppo_trainer import PPOTrainer

    trainer_globals = PPOTrainer.train_on_experience.__globals__
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
    """SFT / RM at learning rate 1e38: the run stops naming the step; no HF model is written, and every
    checkpoint on disk is finite."""
    flags = SFT_FLAGS + ["--max_steps", "30", "--save_steps", "1", "--max_train_samples", "800",
                         "--output_dir", str(tmp_path)]
    flags[flags.index("--learning_rate") + 1] = "1e38"  # overflows fp32 in a few updates (1e6 stays finite on some CPUs)
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
