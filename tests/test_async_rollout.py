"""``--async_rollout K``: a producer process samples K iterations ahead (dschat/rlhf/rollout/producer.py).

What is pinned: the schedule (iteration i trains on a rollout of version max(0, i − K): never older, and really
that old); the behaviour log-probs are those of the version that sampled, recomputed here from a snapshot of the
actor; the importance weights the loss uses are min(π_prox/π_behav, C) per level, recomputed here; ``--resume``
continues exactly; a dead or hung producer ends the run in one line within its deadline."""
from __future__ import annotations

import copy
import os
import signal

import pytest
import torch

from conftest import TINY_PPO, interrupt_then_resume, one_line_error, read_metrics, record_ppo_steps
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.rollout.producer import AsyncRolloutEngine

FLAGS = TINY_PPO + ["--termination", "fixed", "--ngram", "3", "--eval_steps", "0"]


def train_rows(run_dir) -> list:
    return [r for r in read_metrics(str(run_dir)) if "loss/policy" in r]


def snapshot_versions(monkeypatch) -> list:
    """The actor's weights at every version, in order (version 0 when the producer starts, then after each
    update), recorded as the trainer pushes them."""
    versions = []
    real_start, real_mark_stale = AsyncRolloutEngine._start, AsyncRolloutEngine.mark_stale

    def start(self):
        versions.append(copy.deepcopy(self.actor.module.state_dict()))
        real_start(self)

    def mark_stale(self):
        versions.append(copy.deepcopy(self.actor.module.state_dict()))
        real_mark_stale(self)

    monkeypatch.setattr(AsyncRolloutEngine, "_start", start)
    monkeypatch.setattr(AsyncRolloutEngine, "mark_stale", mark_stale)
    return versions


@pytest.mark.parametrize("ahead", [1, 2])
def test_each_iteration_trains_on_the_rollout_of_version_i_minus_k_with_its_log_probs(tmp_path, monkeypatch, ahead):
    """Iteration i (from 0) trains on a rollout sampled by version max(0, i − K): the logged staleness is exactly
    min(i, K) — never more than K, and K once the producer is ahead (the overlap is real) — and the behaviour
    log-probs the correction reads are those of that version: recomputed here from the actor's snapshot at that
    version, they match, while the trainer's own (proximal) log-probs of a stale rollout do not."""
    from dschat.rlhf.experience import sequence_logprobs
    from dschat.model import load_causal_lm, load_tokenizer

    experiences = record_ppo_steps(monkeypatch)
    versions = snapshot_versions(monkeypatch)
    steps = 5
    ppo_main(FLAGS + ["--output_dir", str(tmp_path), "--max_steps", str(steps), "--async_rollout", str(ahead),
                      "--rollout_is", "token"])
    rows = train_rows(tmp_path)
    assert [r["rollout/staleness_max"] for r in rows] == [min(i, ahead) for i in range(steps)]
    assert [r["rollout/staleness_mean"] for r in rows] == [min(i, ahead) for i in range(steps)]
    model = load_causal_lm("tiny-gemma", load_tokenizer("tiny-gemma")).eval()
    for i, experience in enumerate(experiences):
        model.load_state_dict(versions[max(0, i - ahead)])
        with torch.no_grad():
            expected = sequence_logprobs(model, experience.seq, experience.attention_mask, temperature=0.8)
        on = experience.action_mask.bool()
        torch.testing.assert_close(experience.engine_logprobs[on], expected[on], atol=2e-5, rtol=0)
        if i >= ahead:  # a stale rollout: the proximal policy (the trainer's forwards) is another one
            assert (experience.logprobs[on] - experience.engine_logprobs[on]).abs().max() > 1e-3


def independent_weights(logprobs, behaviour, mask, segment_ids, level, cap) -> torch.Tensor:
    """min(π_prox/π_behav, cap) per unit, each token carrying its unit's weight, computed row by row."""
    weights = torch.zeros_like(logprobs)
    for row in range(logprobs.shape[0]):
        on = mask[row].bool()
        diff = (logprobs[row] - behaviour[row]).double()
        if level == "token":
            units = [[t] for t in on.nonzero().flatten().tolist()]
        elif level == "sequence":
            units = [on.nonzero().flatten().tolist()]
        else:
            ids = segment_ids[row]
            units = [(ids == m).nonzero().flatten().tolist() for m in range(int(ids.max()) + 1)]
        for unit in units:
            weights[row, unit] = min(float(torch.exp(diff[unit].sum())), cap)
    return weights


@pytest.mark.parametrize("level,cap", [("token", 1.0005), ("macro", 1.002), ("sequence", 3.0)])
def test_the_loss_weights_are_the_truncated_ratio_to_the_behaviour_policy(tmp_path, monkeypatch, level, cap):
    """``rollout/is_weight_mean`` of every iteration equals the token mean of min(π_prox/π_behav, C) at the
    level, recomputed from the iteration's proximal (trainer) and behaviour (producer) log-probs; the small caps
    make the truncation bind on some units."""
    experiences = record_ppo_steps(monkeypatch)
    ppo_main(FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "4", "--async_rollout", "1",
                      "--rollout_is", level, "--rollout_is_cap", str(cap)])
    rows = train_rows(tmp_path)
    capped = 0
    for row, experience in zip(rows, experiences):
        mask = experience.action_mask
        weights = independent_weights(experience.logprobs, experience.engine_logprobs, mask,
                                      experience.segment_ids, level, cap)
        capped += int((weights[mask.bool()] == cap).sum())
        assert row["rollout/is_weight_mean"] == pytest.approx(float(weights.sum() / mask.sum()), abs=1e-6)
    assert capped > 0 or level == "sequence"


def test_async_resume_continues_exactly(tmp_path, monkeypatch):
    """Interrupted during iteration 4 with the last checkpoint at 2 (its producer drained: the rollouts of 3
    and 4, sampled by versions 1 and 2, saved with it), the resumed run logs what an uninterrupted one does."""
    flags = FLAGS + ["--max_steps", "4", "--save_steps", "2", "--async_rollout", "1", "--rollout_is", "macro"]
    ppo_main(flags + ["--output_dir", str(tmp_path / "full")])
    interrupt_then_resume(ppo_main, flags, tmp_path / "resumed", monkeypatch)
    full, resumed = train_rows(tmp_path / "full"), train_rows(tmp_path / "resumed")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert resumed == full


def test_same_seed_same_rollouts_other_seed_other_rollouts(tmp_path):
    """Each rollout's sampling noise is seeded by (--seed, rank, index), whatever the timing."""
    runs = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        ppo_main(FLAGS + ["--output_dir", str(tmp_path / name), "--max_steps", "2", "--async_rollout", "1",
                          "--seed", seed])
        runs[name] = [r["objective/score"] for r in train_rows(tmp_path / name)]
    assert runs["a"] == runs["b"] and runs["a"] != runs["c"]


def kill_producer_after_first_step(monkeypatch, signum):
    from dschat.rlhf.ppo_trainer import PPOTrainer

    real_step = PPOTrainer.step

    def step(self, batch):
        result = real_step(self, batch)
        os.kill(self.rollout_engine.process.pid, signum)
        return result

    monkeypatch.setattr(PPOTrainer, "step", step)


def test_a_dead_producer_ends_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    kill_producer_after_first_step(monkeypatch, signal.SIGKILL)
    message = one_line_error(ppo_main, FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "4",
                                                "--async_rollout", "2"], capsys)
    assert "the rollout producer died (exit code -9)" in message and "--resume" in message


def test_a_hung_producer_ends_the_run_within_the_timeout(tmp_path, monkeypatch, capsys):
    import time

    kill_producer_after_first_step(monkeypatch, signal.SIGSTOP)
    start = time.monotonic()
    message = one_line_error(ppo_main, FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "4",
                                                "--async_rollout", "1", "--rollout_timeout", "3"], capsys)
    assert "sent no rollout for 3 s (--rollout_timeout)" in message
    assert time.monotonic() - start < 60


@pytest.mark.slow  # three runs in child processes (~1 min)
def test_sigterm_to_the_whole_process_group_checkpoints_and_resumes_exactly(tmp_path):
    """SIGTERM to the trainer and its producer alike (what SLURM sends a job): the producer ignores it, the trainer
    finishes its step, drains the producer into a complete checkpoint and exits 143; the resumed run's metrics
    equal an uninterrupted run's."""
    import subprocess
    import sys
    import time

    from conftest import ROOT, child_env

    flags = FLAGS + ["--max_steps", "12", "--save_steps", "4", "--async_rollout", "2", "--rollout_is", "macro"]

    def command(out, *extra):
        return [sys.executable, "-m", "dschat.cli.ppo", *flags, "--output_dir", str(out), *extra]

    subprocess.run(command(tmp_path / "full"), cwd=ROOT, env=child_env(), check=True, capture_output=True,
                   timeout=900)
    out = tmp_path / "stopped"
    process = subprocess.Popen(command(out), cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    metrics = out / "metrics.jsonl"
    while process.poll() is None and (not metrics.exists() or metrics.read_text().count("loss/policy") < 2):
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=900)
    assert process.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr and "stopped: SIGTERM received: finished step" in stderr
    subprocess.run(command(out, "--resume"), cwd=ROOT, env=child_env(), check=True, capture_output=True,
                   timeout=900)
    assert train_rows(out) == train_rows(tmp_path / "full")


@pytest.mark.slow  # two processes under torchrun (~1 min each)
@pytest.mark.parametrize("transport", ["queue", "collective"])
def test_zero3_two_processes_push_gathered_weights_to_each_producer(tmp_path, transport):
    """Under ZeRO-3 in two processes each rank pushes the gathered actor (in bounded groups) to its own producer,
    by either transport (collective: each rank's own two-member group, apart from the run's): the first rollout's
    behaviour log-probs equal the trainer's (gap exactly 0 at staleness 0), the later ones are one version old."""
    from conftest import torchrun

    torchrun("training/step3_rlhf_finetuning/main.py",
             FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "3", "--async_rollout", "1", "--rollout_is",
                      "macro", "--actor_zero_stage", "3", "--critic_zero_stage", "3", "--rollout_transport", transport])
    rows = train_rows(tmp_path)
    assert [r["rollout/staleness_max"] for r in rows] == [0, 1, 1]
    assert rows[0]["rollout/logprob_abs_diff_max"] == 0 < rows[1]["rollout/logprob_abs_diff_max"]



def test_k0_is_the_synchronous_engine_and_k1_wraps_it(tmp_path):
    """--async_rollout 0 builds the synchronous engine itself (today's loop: nothing of the producer runs);
    K > 0 a producer handle whose evaluation engine is that synchronous engine."""
    from conftest import build_trainer
    from dschat.rlhf.rollout.hf import HFRolloutEngine

    synchronous = build_trainer(tmp_path)
    assert type(synchronous.rollout_engine) is HFRolloutEngine
    ahead = build_trainer(tmp_path, ["--async_rollout", "2", "--rollout_is", "macro"], engines=synchronous.engines)
    assert isinstance(ahead.rollout_engine, AsyncRolloutEngine) and ahead.rollout_engine.ahead == 2
    assert type(ahead.rollout_engine.current) is HFRolloutEngine and ahead.rollout_engine.process is None


ENV_FLAGS = TINY_PPO + ["--env", "consistency", "--max_turns", "2", "--async_rollout", "1", "--eval_steps", "0",
                      "--rollout_is", "token"]
"""Multi-turn episodes (docs/multi-turn.md) played by the producer."""


def test_the_producer_plays_env_episodes(tmp_path, monkeypatch):
    """--env with --async_rollout 1: the producer plays whole episodes — each trained row holds two replies with
    the observation between them out of the action mask, scored by the consistency rule applied here to the
    decoded replies — and iteration i's rollout is min(i, 1) versions old."""
    from dschat.model import load_tokenizer

    experiences = record_ppo_steps(monkeypatch)
    ppo_main(ENV_FLAGS + ["--max_steps", "2", "--output_dir", str(tmp_path)])
    rows = train_rows(tmp_path)
    assert [r["rollout/staleness_mean"] for r in rows] == [0.0, 1.0]
    assert all(r["episode/turns"] == 2 for r in rows)
    tokenizer = load_tokenizer("tiny-gemma")
    for experience in experiences:
        on = experience.action_mask.bool()
        starts = (on & ~torch.nn.functional.pad(on[:, :-1], (1, 0), value=False)).sum(dim=1)
        assert starts.tolist() == [2] * on.shape[0]  # two replies, an observation between them
        for row in range(on.shape[0]):
            replies, current, previous = [], [], False
            for token, action in zip(experience.seq[row, 1:].tolist(), on[row].tolist()):
                if action:
                    current.append(token)
                elif previous:
                    replies.append(current)
                    current = []
                previous = action
            if current:
                replies.append(current)
            answers = [tokenizer.decode(reply, skip_special_tokens=True).strip()[:1] for reply in replies]
            assert experience.scores[row].item() == float(bool(answers[0]) and answers[0] == answers[1])


@pytest.mark.slow
def test_async_env_episodes_resume_exactly(tmp_path, monkeypatch):
    """Interrupted during iteration 4 with the last checkpoint at 2, a run of producer-played episodes logs what
    an uninterrupted one does (the drained rollouts saved with their episodes' masks and scores)."""
    flags = ENV_FLAGS + ["--max_steps", "4", "--save_steps", "2"]
    ppo_main(flags + ["--output_dir", str(tmp_path / "full")])
    interrupt_then_resume(ppo_main, flags, tmp_path / "resumed", monkeypatch)
    assert train_rows(tmp_path / "resumed") == train_rows(tmp_path / "full")
