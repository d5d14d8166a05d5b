"""``--partial_rollout``: responses continued across policy versions between decode chunks
(dschat/rlhf/rollout/partial.py). What is pinned, against computations written here: a response can be sampled
by two versions, each token carrying its own version and that version's behaviour log-prob (a forward of that
version's weights, done here); no response token is more than K versions old when trained on, checked per token;
resume restores each drained rollout with its token versions; without the flag every token of rollout i is version
max(0, i − K), as before."""
from __future__ import annotations

import copy
import functools
import time

import pytest
import torch

from conftest import TINY_PPO, interrupt_then_resume, one_line_error, read_metrics, record_ppo_steps
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.rollout.producer import AsyncRolloutEngine
from test_async_rollout import snapshot_versions

FLAGS = TINY_PPO + ["--termination", "fixed", "--ngram", "3", "--eval_steps", "0", "--max_answer_seq_len", "16",
                    "--async_rollout", "1", "--rollout_is", "macro"]
PARTIAL = ["--partial_rollout", "--partial_rollout_chunk", "2"]
TEMPERATURE = 0.8  # the sampling temperature the log-probs are taken at (PPO's default)


def by_hand_logprobs(model, seq: torch.Tensor, prompt_mask: torch.Tensor, eos: int) -> tuple:
    """``(log-probs [B, T-1], response mask [B, T-1])`` of ``seq = [left-padded prompt | response]`` under
    ``model``: one forward, positions counted over the attention mask, the response up to and including eos."""
    prompt_len = prompt_mask.shape[1]
    response = seq[:, prompt_len:]
    is_eos = (response == eos).long()
    on_response = ((is_eos.cumsum(1) - is_eos) == 0).long()
    attention = torch.cat([prompt_mask.long(), on_response], dim=1)
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=seq, attention_mask=attention, position_ids=positions).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits / TEMPERATURE, dim=-1).gather(-1, seq[:, 1:, None]).squeeze(-1)
    mask = torch.zeros_like(logprobs, dtype=torch.bool)
    mask[:, prompt_len - 1:] = on_response.bool()
    return logprobs, mask


def logprobs_of_each_version(model, weights: list, seq: torch.Tensor, prompt_mask: torch.Tensor, eos: int) -> list:
    """:func:`by_hand_logprobs` of ``seq`` under each state dict of ``weights`` loaded into a copy of ``model``."""
    reference = copy.deepcopy(model)
    found = []
    for state in weights:
        reference.load_state_dict(state)
        found.append(by_hand_logprobs(reference, seq, prompt_mask, eos))
    return found


def tiny_model():
    from dschat.model import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer("tiny-gemma")
    return load_causal_lm("tiny-gemma", tokenizer).eval(), tokenizer


# -- the chunked sampler itself, in this process --------------------------------------------------------------
def test_a_version_loaded_between_chunks_samples_the_rest_and_each_token_is_scored_by_its_own_version():
    """Two chunks of 3 tokens with version 0, then version 1 (other weights) loaded: tokens 0-5 carry version 0,
    6-11 version 1, and each token's behaviour log-prob equals a forward of its own version's weights (done here),
    not of the other's; ``score`` ran before the weights were replaced."""
    from dschat.rlhf.experience import SamplingConfig
    from dschat.rlhf.rollout import PlainModel
    from dschat.rlhf.rollout.hf import HFRolloutEngine
    from dschat.rlhf.rollout.partial import sample_in_chunks

    model, tokenizer = tiny_model()
    torch.manual_seed(0)
    weights = [copy.deepcopy(model.state_dict())]
    weights.append({k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v
                    for k, v in weights[0].items()})
    prompts = torch.randint(3, 200, (3, 5))
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[0, :2] = 0
    prompts[0, :2] = tokenizer.pad_token_id
    chunks, scored_before_load = [], []

    def between_chunks(score):
        chunks.append(1)
        if len(chunks) == 2:
            score()
            scored_before_load.append(True)
            model.load_state_dict(weights[1])
            return 1
        return 1 if len(chunks) > 2 else 0

    sampling = SamplingConfig(max_new_tokens=12, temperature=TEMPERATURE)
    engine = HFRolloutEngine(PlainModel(model), tokenizer.pad_token_id, tokenizer.eos_token_id)
    rollout = sample_in_chunks(engine, model, prompts, prompt_mask, sampling, 3, 0, between_chunks,
                               tokenizer.pad_token_id, tokenizer.eos_token_id, TEMPERATURE)
    assert len(chunks) == 3 and scored_before_load
    assert rollout.token_versions.tolist() == [[0] * 6 + [1] * 6] * 3
    per_version = logprobs_of_each_version(model, weights, rollout.seq, prompt_mask, tokenizer.eos_token_id)
    mask = per_version[0][1]
    token_version = torch.zeros_like(mask, dtype=torch.long)
    token_version[:, prompts.shape[1] - 1:] = rollout.token_versions
    expected = torch.where(token_version == 0, per_version[0][0], per_version[1][0])
    torch.testing.assert_close(rollout.engine_logprobs[mask], expected[mask], atol=2e-5, rtol=0)
    other = torch.where(token_version == 0, per_version[1][0], per_version[0][0])
    assert (rollout.engine_logprobs[mask] - other[mask]).abs().max() > 1e-2


def test_the_staleness_bound_is_checked_per_token_not_per_response():
    """A response whose last tokens are fresh but whose first are K + 1 versions old breaks the bound (a check
    of each response's newest, or typical, version would pass it); tokens off the response are not counted."""
    from dschat.rlhf.rollout.partial import stale_token

    versions = torch.tensor([[3, 3, 3, 3], [1, 3, 3, 3], [0, 0, 3, 3]])
    on = torch.tensor([[True] * 4, [True] * 4, [False, False, True, True]])
    assert stale_token(3, versions, on, bound=1) == (1, 0, 1)
    assert stale_token(3, versions, on, bound=2) is None
    assert stale_token(3, versions[2:], on[2:], bound=0) is None


def test_version_statistics_count_responses_and_tokens_sampled_by_several_versions():
    from dschat.rlhf.rollout.partial import version_stats

    versions = torch.tensor([[2, 2, 2, 2], [1, 1, 2, 2], [0, 1, 2, 2]])
    on = torch.tensor([[True] * 4, [True, True, True, False], [True, True, True, True]])
    stats = version_stats(2, versions, on)
    assert stats["rollout/multi_version_responses"] == pytest.approx(2 / 3)
    assert stats["rollout/multi_version_tokens"] == pytest.approx(7 / 11)
    assert stats["rollout/version_spread_max"] == 2 and stats["rollout/version_spread_mean"] == pytest.approx(1)
    assert stats["rollout/staleness_max"] == 2
    assert stats["rollout/staleness_mean"] == pytest.approx((0 + 1 + 1 + 0 + 2 + 1 + 0 + 0) / 11)


# -- whole runs with a producer ---------------------------------------------------------------------------------
def slow_chunks(delay: float, *args) -> None:
    """A producer whose every engine call (with --partial_rollout, every decode chunk) takes ``delay`` seconds
    longer (a long generation), so that the trainer's next version arrives while a rollout is in flight; then the
    usual producer, on either engine."""
    from dschat.rlhf.rollout.base import RolloutEngine
    from dschat.rlhf.rollout.producer import producer_main

    real = RolloutEngine.generate

    def generate(self, *a, **k):
        time.sleep(delay)
        return real(self, *a, **k)

    RolloutEngine.generate = generate
    producer_main(*args)


def record_rollouts(monkeypatch, delay: float = 0.25) -> list:
    """``(index, the actor's version when trained on, Rollout, prompt mask)`` of every rollout the trainer takes,
    and the actor's weights of every version pushed (``versions``, by version)."""
    import dschat.rlhf.rollout.producer as producer

    taken, versions = [], snapshot_versions(monkeypatch)
    real_next = AsyncRolloutEngine.next_rollout

    def next_rollout(self, prompts, prompt_mask, sampling, record_entropy):
        index = self.trained
        rollout = real_next(self, prompts, prompt_mask, sampling, record_entropy)
        taken.append((index, self.version, rollout, prompt_mask.clone()))
        return rollout

    monkeypatch.setattr(AsyncRolloutEngine, "next_rollout", next_rollout)
    monkeypatch.setattr(producer, "producer_main", functools.partial(slow_chunks, delay))
    return taken, versions


def check_each_token_against_its_version(taken: list, versions: dict, rows: list, atol: float) -> int:
    """Every response token's behaviour log-prob of the rollouts ``taken`` equals a forward, done here, of the
    weights of the version it records (``versions``) to ``atol``; no response token is more than K = 1 versions
    older than the actor that trains on it; the logged staleness and multi-version fraction (``rows``, one per
    iteration) are those of the recorded versions. Returns how many responses two or more versions sampled."""
    model, tokenizer = tiny_model()
    mixed = 0
    for (index, trained_version, rollout, prompt_mask), row in zip(taken, rows):
        prompt_len = prompt_mask.shape[1]
        token_version = torch.full(rollout.engine_logprobs.shape, -1, dtype=torch.long)
        token_version[:, prompt_len - 1:] = rollout.token_versions
        mask = None
        expected = torch.zeros_like(rollout.engine_logprobs)
        for version in token_version.unique().tolist():
            if version < 0:
                continue
            model.load_state_dict(versions[version])
            logprobs, mask = by_hand_logprobs(model, rollout.seq, prompt_mask, tokenizer.eos_token_id)
            expected = torch.where(token_version == version, logprobs, expected)
        torch.testing.assert_close(rollout.engine_logprobs[mask], expected[mask], atol=atol, rtol=0)
        response_versions = [set(token_version[r][mask[r]].tolist()) for r in range(mask.shape[0])]
        mixed += sum(len(v) > 1 for v in response_versions)
        staleness = trained_version - token_version[mask]
        assert int(staleness.max()) <= 1 and int(staleness.min()) >= 0
        assert row["rollout/staleness_max"] == int(staleness.max())
        assert row["rollout/staleness_mean"] == pytest.approx(float(staleness.double().mean()), abs=1e-6)
        assert row["rollout/multi_version_responses"] == pytest.approx(
            sum(len(v) > 1 for v in response_versions) / len(response_versions))
        assert max(index - v for v in token_version[mask].tolist()) <= 1
    return mixed


def test_partial_rollouts_mix_versions_within_a_response_each_token_with_its_own_log_prob(tmp_path, monkeypatch):
    """K = 1, chunks of 2 tokens, responses of 16, a producer slower than the trainer: some responses are sampled
    by two versions; every response token's behaviour log-prob equals a forward, done here, of the weights of the
    version it records; no response token is more than K versions older than the actor that trains on it, and the
    logged staleness and multi-version fractions are those of the recorded versions."""
    taken, versions = record_rollouts(monkeypatch)
    steps = 4
    ppo_main(FLAGS + PARTIAL + ["--output_dir", str(tmp_path), "--max_steps", str(steps)])
    rows = [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]
    assert len(taken) == steps
    assert check_each_token_against_its_version(taken, versions, rows, atol=2e-5) > 0


@pytest.mark.slow  # two runs with a slowed producer (~90 s)
def test_partial_resume_trains_each_drained_rollout_with_its_token_versions(tmp_path, monkeypatch):
    """Interrupted as iteration 4 starts, the last checkpoint at 2: the resumed run's iteration 3 trains on the very
    rollout the interrupted run did (tokens, per-token versions, behaviour log-probs, drained into the
    checkpoint) from the same actor, so its experience is the same, bit for bit."""
    taken, _ = record_rollouts(monkeypatch)
    experiences = record_ppo_steps(monkeypatch)
    flags = FLAGS + PARTIAL + ["--max_steps", "4", "--save_steps", "2"]
    interrupt_then_resume(ppo_main, flags, tmp_path, monkeypatch)
    indices = [index for index, *_ in taken]
    assert indices == [0, 1, 2, 2, 3]
    before, after = taken[2][2], taken[3][2]
    for name in ("seq", "token_versions", "engine_logprobs", "entropy"):
        assert torch.equal(getattr(before, name), getattr(after, name)), name
    for name in ("seq", "logprobs", "engine_logprobs", "advantages", "segment_ids"):
        assert torch.equal(getattr(experiences[2], name), getattr(experiences[3], name)), name


def test_without_the_flag_every_token_of_rollout_i_is_version_i_minus_k(tmp_path, monkeypatch):
    """K = 1 without --partial_rollout: the schedule as before — whole rollouts, every token of rollout i sampled
    by version max(0, i − 1), and none of the multi-version metrics logged."""
    taken, _ = record_rollouts(monkeypatch)
    ppo_main(FLAGS + ["--output_dir", str(tmp_path), "--max_steps", "3"])
    for index, _, rollout, _ in taken:
        assert rollout.token_versions.unique().tolist() == [max(0, index - 1)]
    assert not any("multi_version" in key for row in read_metrics(str(tmp_path)) for key in row)


@pytest.mark.parametrize("extra,expected", [
    (["--async_rollout", "0", "--rollout_is", "none", "--partial_rollout"], "--partial_rollout: the asynchronous"),
    (["--partial_rollout_chunk", "4"], "--partial_rollout_chunk 4: needs --partial_rollout"),
])
def test_partial_rollout_flags_are_refused_without_what_they_need(tmp_path, capsys, extra, expected):
    message = one_line_error(ppo_main, FLAGS + extra + ["--output_dir", str(tmp_path), "--max_steps", "1"], capsys)
    assert expected in message
