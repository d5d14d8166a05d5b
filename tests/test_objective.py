"""The objective at every level (issue 49, docs/objective.md): each --ratio unit, clip bound, --loss_agg and rollout
correction mode against loops written here in float64 (not the project's helpers), on random inputs with ragged
masks and macros of one token, several tokens and the whole response; the limits that tie the levels together;
the GRPO family's reward-side knobs; and each flag reaching the loss of a real step-3 run."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from conftest import TINY_PPO, read_metrics
from dschat.rlhf.advantage_estimators import SequenceBaselineEstimator, grpo_advantages, reinforce_advantages, \
    rloo_advantages, scale_advantages
from dschat.rlhf.dynamic_sampling import constant_groups, overlong_penalty
from dschat.rlhf.macro_action import importance_weights, policy_loss
from dschat.rlhf.macro_action.correction import correction_statistics
from dschat.rlhf.ppo_trainer import PPOTrainer
from dschat.rlhf.rollout import Rollout
from dschat.rlhf.rollout.hf import HFRolloutEngine

RATIOS = ("token", "macro", "macro_geo", "sequence_geo")
AGGS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm", "macro_mean")
NORM = 11


def ragged_batch(seed: int = 0):
    """Six rows of width 10, padded on either side: macros all of one token, of several lengths (1-4), one macro for
    the whole response, a one-token response, and a row without response tokens (a dropped sample)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 0, 0, 0],
                         [0, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                         [0, 0, 0, 1, 1, 1, 1, 1, 0, 0],
                         [0, 0, 0, 0, 0, 0, 0, 1, 0, 0],
                         [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                         [1, 1, 1, 1, 1, 1, 1, 1, 1, 0]], dtype=torch.bool)
    segments = torch.tensor([[-1, -1, 0, 1, 2, 3, 4, -1, -1, -1],
                             [-1, 0, 0, 1, 2, 2, 2, 2, 3, 3],
                             [-1, -1, -1, 0, 0, 0, 0, 0, -1, -1],
                             [-1, -1, -1, -1, -1, -1, -1, 0, -1, -1],
                             [-1] * 10,
                             [0, 0, 0, 1, 1, 2, 3, 3, 3, -1]])
    old = torch.randn(mask.shape, generator=g, dtype=torch.float64) - 2.0
    new = old + 0.6 * torch.randn(mask.shape, generator=g, dtype=torch.float64)
    advantages = torch.randn(mask.shape[0], 1, generator=g, dtype=torch.float64).expand(mask.shape)
    advantages = torch.where(mask, advantages, torch.zeros_like(new))
    weights = torch.rand(mask.shape, generator=g, dtype=torch.float64) * 2
    return new, old, advantages, mask, segments, weights


def units_of_row(mask_row, segments_row, kind):
    """The units of one row (lists of positions): tokens, the row's macros, or the whole response."""
    positions = [t for t, on in enumerate(mask_row) if on]
    if kind == "token":
        return [[t] for t in positions]
    if kind == "sequence_geo":
        return [positions] if positions else []
    macros = {}
    for t in positions:
        macros.setdefault(segments_row[t], []).append(t)
    return list(macros.values())


def loop_loss(new, old, advantages, mask, segments, ratio, eps_low, eps_high, agg, weights=None, norm=NORM):
    """The loss written out unit by unit (float64 lists, math.exp): each unit's clipped term, weighted by the mean
    of its tokens' weights, on each of its tokens; then the aggregation over tokens, rows or macros."""
    new, old, adv, mask, segs = (x.tolist() for x in (new, old, advantages, mask, segments))
    wts = None if weights is None else weights.tolist()
    rows, width = len(mask), len(mask[0])
    token_term = [[None] * width for _ in range(rows)]
    for b in range(rows):
        for unit in units_of_row(mask[b], segs[b], ratio):
            logs = [new[b][t] - old[b][t] for t in unit]
            log_ratio = sum(logs) if ratio in ("token", "macro") else sum(logs) / len(logs)
            r = math.exp(min(log_ratio, 20.0))
            a = sum(adv[b][t] for t in unit) / len(unit)
            term = max(-a * r, -a * min(max(r, 1 - eps_low), 1 + eps_high))
            if wts is not None:
                term *= sum(wts[b][t] for t in unit) / len(unit)
            for t in unit:
                token_term[b][t] = term
    row_terms = [[token_term[b][t] for t in range(width) if mask[b][t]] for b in range(rows)]
    nonempty = [terms for terms in row_terms if terms]
    if agg == "token_mean":
        return sum(map(sum, nonempty)) / sum(map(len, nonempty))
    if agg == "seq_mean_token_sum":
        return sum(sum(terms) for terms in nonempty) / len(nonempty)
    if agg == "seq_mean_token_mean":
        return sum(sum(terms) / len(terms) for terms in nonempty) / len(nonempty)
    if agg == "seq_mean_token_sum_norm":
        return sum(map(sum, nonempty)) / (len(nonempty) * norm)
    macro_terms = [sum(token_term[b][t] for t in unit) / len(unit)
                   for b in range(rows) for unit in units_of_row(mask[b], segs[b], "macro")]
    return sum(macro_terms) / len(macro_terms)


def loss_of(new, old, advantages, mask, segments, ratio, eps_low, eps_high, agg, weights=None):
    return policy_loss(new, old, advantages, mask, eps_low, segment_ids=segments, ratio=ratio, weights=weights,
                       clip_eps_high=eps_high, loss_agg=agg, norm_length=NORM)[0].item()


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("ratio", RATIOS)
def test_every_ratio_and_aggregation_equals_the_loop(ratio, agg):
    """Unit × aggregation, asymmetric clip (0.1, 0.35), with and without correction weights, on three seeds."""
    for seed in range(3):
        new, old, advantages, mask, segments, weights = ragged_batch(seed)
        for w in (None, weights):
            expected = loop_loss(new, old, advantages, mask, segments, ratio, 0.1, 0.35, agg, w)
            assert loss_of(new, old, advantages, mask, segments, ratio, 0.1, 0.35, agg, w) == \
                pytest.approx(expected, rel=1e-10, abs=1e-12)


def test_the_inputs_reach_both_clip_bounds_and_the_aggregations_differ():
    """Not vacuous: some units are clipped above (Â > 0, r > 1 + ε_high) and below (Â < 0, r < 1 − ε_low) at every
    level, so ignoring either bound changes the loss; the five aggregations give five different losses."""
    batches = [ragged_batch(seed)[:5] for seed in range(3)]  # the seeds of the loop comparison
    for ratio in RATIOS:
        sym = [loop_loss(*b, ratio, 0.1, 0.1, "token_mean") for b in batches]
        high = [loop_loss(*b, ratio, 0.1, 0.35, "token_mean") for b in batches]
        low = [loop_loss(*b, ratio, 0.3, 0.1, "token_mean") for b in batches]
        assert any(abs(h - s) > 1e-6 for h, s in zip(high, sym)), ratio
        assert any(abs(lo - s) > 1e-6 for lo, s in zip(low, sym)), ratio
    new, old, advantages, mask, segments, _ = batches[0] + (None,)
    losses = {round(loop_loss(new, old, advantages, mask, segments, "token", 0.2, 0.2, agg), 9) for agg in AGGS}
    assert len(losses) == len(AGGS)


def test_upper_clip_bound_is_read():
    """clip_eps_high alone moves the loss exactly as the loop says (the upper bound is not clip_eps)."""
    new, old, advantages, mask, segments, _ = ragged_batch(1)
    for ratio in RATIOS:
        got = loss_of(new, old, advantages, mask, segments, ratio, 0.1, 0.5, "token_mean")
        assert got == pytest.approx(loop_loss(new, old, advantages, mask, segments, ratio, 0.1, 0.5, "token_mean"))
        assert got != pytest.approx(loss_of(new, old, advantages, mask, segments, ratio, 0.1, 0.1, "token_mean"))


@pytest.mark.parametrize("agg", AGGS)
def test_one_token_macros_make_macro_and_macro_geo_the_token_ratio(agg):
    """--ngram 1: every macro is a token, so macro and macro_geo equal token (each aggregation)."""
    new, old, advantages, mask, _, weights = ragged_batch(2)
    one_gram = torch.where(mask, mask.long().cumsum(dim=1) - 1, torch.full_like(mask, -1, dtype=torch.long))
    token = loss_of(new, old, advantages, mask, one_gram, "token", 0.2, 0.3, agg, weights)
    for ratio in ("macro", "macro_geo"):
        assert loss_of(new, old, advantages, mask, one_gram, ratio, 0.2, 0.3, agg, weights) == \
            pytest.approx(token, rel=1e-12)


@pytest.mark.parametrize("agg", AGGS)
def test_one_macro_per_response_makes_macro_geo_gspos_sequence_ratio(agg):
    """The whole response one macro (n → ∞): macro_geo equals sequence_geo (value and gradient)."""
    new, old, advantages, mask, _, weights = ragged_batch(3)
    whole = torch.where(mask, torch.zeros_like(mask, dtype=torch.long), torch.full_like(mask, -1, dtype=torch.long))
    grads = []
    for ratio in ("macro_geo", "sequence_geo"):
        leaf = new.clone().requires_grad_(True)
        loss = policy_loss(leaf, old, advantages, mask, 0.2, segment_ids=whole, ratio=ratio, weights=weights,
                           clip_eps_high=0.3, loss_agg=agg, norm_length=NORM)[0]
        loss.backward()
        grads.append((loss.item(), leaf.grad))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-12)
    torch.testing.assert_close(grads[0][1], grads[1][1])


def test_sequence_geo_gradient_is_gspos():
    """GSPO's gradient (Zheng et al. 2025, eq. 11), written out: for an unclipped sequence the loss term is
    −Â·s_i with s_i = exp(mean_t log r_t), so ∂/∂ log π_t = −Â·s_i/|y_i| (per sequence, then the mean over rows)."""
    new, old, advantages, mask, segments, _ = ragged_batch(4)
    leaf = new.clone().requires_grad_(True)
    policy_loss(leaf, old, advantages, mask, 10.0, segment_ids=segments, ratio="sequence_geo",
                loss_agg="seq_mean_token_mean")[0].backward()
    rows = [b for b in range(mask.shape[0]) if mask[b].any()]
    expected = torch.zeros_like(new)
    for b in rows:
        on = mask[b]
        s = math.exp(float((new[b] - old[b])[on].mean()))
        expected[b, on] = -float(advantages[b][on][0]) * s / int(on.sum()) / len(rows)
    torch.testing.assert_close(leaf.grad, expected)


def loop_weights(old, engine, mask, segments, level, mode, low, cap, agg):
    """Correction weights per unit in float64: product or geometric mean of the token ratios, then clamped into
    [low, cap] (truncate) or 0 outside it (mask)."""
    old, engine, mask, segs = (x.tolist() for x in (old, engine, mask, segments))
    out = [[0.0] * len(mask[0]) for _ in mask]
    for b in range(len(mask)):
        kind = {"token": "token", "macro": "macro", "sequence": "sequence_geo"}[level]
        for unit in units_of_row(mask[b], segs[b], kind):
            logs = [old[b][t] - engine[b][t] for t in unit]
            w = math.exp(min(sum(logs) / (len(logs) if agg == "geo" else 1), 20.0))
            w = min(max(w, low), cap) if mode == "truncate" else (w if low <= w <= cap else 0.0)
            for t in unit:
                out[b][t] = w
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("agg", ["product", "geo"])
@pytest.mark.parametrize("mode", ["truncate", "mask"])
@pytest.mark.parametrize("level", ["token", "macro", "sequence"])
def test_correction_weights_equal_the_loop(level, mode, agg):
    new, old, _, mask, segments, _ = ragged_batch(5)
    engine = old - 0.4 * (new - old)
    for low, cap in ((0.0, 3.0), (0.8, 1.25)):
        got = importance_weights(old, engine, mask, level, cap, segments, mode=mode, low=low, agg=agg)
        torch.testing.assert_close(got, loop_weights(old, engine, mask, segments, level, mode, low, cap, agg))


def test_mask_zeroes_what_truncate_clamps_and_geo_is_not_the_product():
    """With bounds [0.8, 1.25] some units fall outside at every level: mask gives them 0 where truncate gives a
    bound; the geometric mean of a several-token unit differs from the product."""
    new, old, _, mask, segments, _ = ragged_batch(5)
    engine = old - 0.4 * (new - old)
    for level in ("token", "macro", "sequence"):
        masked = importance_weights(old, engine, mask, level, 1.25, segments, mode="mask", low=0.8)
        truncated = importance_weights(old, engine, mask, level, 1.25, segments, mode="truncate", low=0.8)
        outside = mask & (masked == 0)
        assert outside.any() and (truncated[outside] > 0).all()
        assert ((truncated[outside] == 0.8) | (truncated[outside] == 1.25)).all()
        if level != "token":
            geo = importance_weights(old, engine, mask, level, 1e6, segments, agg="geo")
            product = importance_weights(old, engine, mask, level, 1e6, segments, agg="product")
            assert not torch.allclose(geo[mask], product[mask])


def test_a_masked_unit_keeps_its_tokens_in_the_denominator():
    """A masked unit adds 0 to the numerator and its tokens still count in token_mean's denominator (TRL's
    choice, docs/objective.md): the loss is the loop's with weight 0 on those tokens."""
    new, old, advantages, mask, segments, _ = ragged_batch(6)
    engine = old - 0.4 * (new - old)
    weights = importance_weights(old, engine, mask, "macro", 1.25, segments, mode="mask", low=0.8)
    assert (mask & (weights == 0)).any()
    expected = loop_loss(new, old, advantages, mask, segments, "macro", 0.2, 0.2, "token_mean", weights)
    assert loss_of(new, old, advantages, mask, segments, "macro", 0.2, 0.2, "token_mean", weights) == \
        pytest.approx(expected, rel=1e-10)


def test_correction_statistics():
    new, old, _, mask, segments, _ = ragged_batch(7)
    engine = old - 0.4 * (new - old)
    weights = importance_weights(old, engine, mask, "token", 1.25, segments, mode="mask", low=0.8)
    stats = correction_statistics(weights, old, engine, mask)
    on = mask.tolist()
    w, o, e = weights.tolist(), old.tolist(), engine.tolist()
    pairs = [(b, t) for b in range(len(on)) for t in range(len(on[0])) if on[b][t]]
    assert stats["is_weight_mean"].item() == pytest.approx(sum(w[b][t] for b, t in pairs) / len(pairs))
    assert stats["is_masked"].item() == pytest.approx(sum(w[b][t] == 0 for b, t in pairs) / len(pairs))
    assert stats["mismatch_kl_k1"].item() == pytest.approx(sum(e[b][t] - o[b][t] for b, t in pairs) / len(pairs))
    k3 = [math.exp(o[b][t] - e[b][t]) - 1 - (o[b][t] - e[b][t]) for b, t in pairs]
    assert stats["mismatch_kl_k3"].item() == pytest.approx(sum(k3) / len(pairs))


# ------------------------------------------------------------------------------------------ reward side


RETURNS = torch.tensor([1.0, 2.0, 6.0, 3.0, 3.0, 3.0, -1.0, 4.0, 0.5], dtype=torch.float64)


def stdev(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_scale_rewards_for_every_critic_free_baseline(scale):
    """A / (std + 1e-4) with the group's or the batch's unbiased std of the returns, or A unchanged (Dr. GRPO);
    GRPO's A is R − group mean, constant groups exactly 0."""
    values = RETURNS.tolist()
    groups = [values[i:i + 3] for i in range(0, 9, 3)]
    centred = [[0.0] * 3 if len(set(g)) == 1 else [r - sum(g) / 3 for r in g] for g in groups]
    divisor = {"group": [stdev(g) + 1e-4 for g in groups for _ in g], "batch": [stdev(values) + 1e-4] * 9,
               "none": [1.0] * 9}[scale]
    expected = [a / d for a, d in zip((a for g in centred for a in g), divisor)]
    assert grpo_advantages(RETURNS, 3, scale=scale).tolist() == pytest.approx(expected, rel=1e-12)
    rloo = rloo_advantages(RETURNS, 3).tolist()
    assert scale_advantages(rloo_advantages(RETURNS, 3), RETURNS, 3, scale).tolist() == \
        pytest.approx([a / d for a, d in zip(rloo, divisor)], rel=1e-12)
    estimator = SequenceBaselineEstimator(reinforce_advantages, 3, scale=scale)
    mask = torch.ones(9, 1, dtype=torch.bool)
    tokens, _, _ = estimator(None, RETURNS.float().unsqueeze(1), torch.zeros(9, 1, dtype=torch.long), mask)
    assert tokens.squeeze(1).tolist() == pytest.approx([r / d for r, d in zip(values, divisor)], rel=1e-5)


@pytest.mark.parametrize("algo", ["rloo", "grpo", "reinforce"])
def test_scale_rewards_reaches_the_estimator_each_algo_builds(algo):
    """``--scale_rewards batch`` (non-default for every algo) reaches the estimator step 3 builds from the flags:
    its advantages are the unscaled ones over the batch's unbiased std + 1e-4 (mutation: the scale not passed)."""
    from dschat.rlhf.advantage_estimators import build_advantage_estimator
    from dschat.stages.configs import PPOConfig

    def advantages(scale):
        estimator = build_advantage_estimator(PPOConfig(algo=algo, num_samples_per_prompt=3, scale_rewards=scale))
        mask = torch.ones(9, 1, dtype=torch.bool)
        return estimator(None, RETURNS.float().unsqueeze(1), torch.zeros(9, 1, dtype=torch.long), mask)[0].squeeze(1)

    divisor = stdev(RETURNS.tolist()) + 1e-4
    assert divisor > 1.5
    assert advantages("batch").tolist() == pytest.approx((advantages("none") / divisor).tolist(), rel=1e-5)


def test_overlong_penalty_is_daps_soft_punishment():
    """DAPO eq. 13 with L_max = 10, L_cache = 4: 0 up to 6 tokens, then (6 − |y|)/4 · factor, −factor at 10."""
    lengths = torch.tensor([0, 3, 6, 7, 8, 10, 12])
    expected = [0.0, 0.0, 0.0, -0.25 * 2, -0.5 * 2, -1.0 * 2, -1.0 * 2]
    assert overlong_penalty(lengths, 10, 4, 2.0).tolist() == pytest.approx(expected)
    assert overlong_penalty(lengths, 10, 0, 2.0).tolist() == [0.0] * 7


def test_constant_groups():
    assert constant_groups(torch.tensor([1.0, 1.0, 0.0, 1.0, 2.0, 2.0]), 2).tolist() == [True, False, True]


class ScriptedEngine:
    """A rollout engine whose responses are given: each call to ``generate`` returns the next scripted batch
    (one token per row: its score is the token id)."""

    def __init__(self, batches):
        self.batches, self.calls = list(batches), []

    def generate(self, prompts, prompt_mask, sampling, record_entropy=False):
        self.calls.append(prompts[:, 0].tolist())
        tokens = torch.tensor(self.batches.pop(0)).unsqueeze(1)
        return Rollout(seq=torch.cat([prompts, tokens], dim=1), entropy=torch.zeros(len(tokens), prompts.shape[1]))


def filter_trainer(engine, max_tries):
    trainer = PPOTrainer.__new__(PPOTrainer)
    trainer.config = SimpleNamespace(num_samples_per_prompt=2, filter_groups_max_tries=max_tries)
    trainer.rollout_engine = engine
    trainer.tokenizer = SimpleNamespace(eos_token_id=99, pad_token_id=0, decode=lambda ids, **_: str(ids.tolist()))
    trainer.reward_source = lambda seq, attention_mask, responses, meta: (seq[:, -1].float(), {})
    trainer.engines = SimpleNamespace(actor=SimpleNamespace(device=torch.device("cpu")))
    trainer.sampling = None
    return trainer


def test_filter_groups_samples_constant_groups_again_within_its_tries(monkeypatch):
    """Groups (prompt 10: scores 1, 1), (prompt 20: 3, 4), (prompt 30: 5, 5): the constant groups' prompts are
    sampled again; prompt 10's new samples differ (2, 3) and replace it, prompt 30's stay constant and after the
    second round (tries exhausted) it is kept; the counts land in filter/*."""
    monkeypatch.setattr("dschat.rlhf.ppo_trainer.any_rank", lambda flag, device=None: flag)
    prompts = torch.tensor([[10], [10], [20], [20], [30], [30]])
    engine = ScriptedEngine([[2, 3, 5, 5], [6, 6]])
    trainer = filter_trainer(engine, max_tries=2)
    first = Rollout(seq=torch.cat([prompts, torch.tensor([[1], [1], [3], [4], [5], [5]])], dim=1),
                    entropy=torch.zeros(6, 1))
    rollout = trainer.refill_constant_groups(first, prompts, torch.ones_like(prompts), None)
    assert engine.calls == [[10, 10, 30, 30], [30, 30]]
    assert rollout.seq[:, -1].tolist() == [2, 3, 3, 4, 5, 5]
    assert rollout.stats["filter/constant_groups_first"].item() == pytest.approx(2 / 3)
    assert rollout.stats["filter/constant_groups_kept"].item() == pytest.approx(1 / 3)
    assert rollout.stats["filter/rounds"].item() == 2


# ------------------------------------------------------------------------------------------ flags reach the loss


class EarlyStopEngine(HFRolloutEngine):
    """The HF engine with row b's response ended by EOS after 2 + (b mod 4) tokens (the random tiny actor itself
    never stops early): ragged responses of 3 to 6 tokens."""

    def sample(self, prompts, prompt_mask, sampling, record_entropy):
        rollout = super().sample(prompts, prompt_mask, sampling, record_entropy)
        seq = rollout.seq.clone()
        for b in range(seq.shape[0]):
            end = prompts.shape[1] + 2 + b % 4
            seq[b, end] = self.eos_token_id
            seq[b, end + 1:] = self.pad_token_id
        return Rollout(seq, rollout.entropy)


def critic_free_run(tmp_path, monkeypatch, flags):
    """One on-policy GRPO iteration (ratio ≡ 1) of the tiny Gemma on the embedded task, 2 prompts × K = 2, ragged
    responses (:class:`EarlyStopEngine`)."""
    from dschat.cli.ppo import main as ppo_main
    from dschat.stages import ppo

    monkeypatch.setattr(ppo, "build_rollout_engine", lambda args, actor, tokenizer, world_size, *_: EarlyStopEngine(
        actor, tokenizer.pad_token_id, tokenizer.eos_token_id))
    ppo_main(TINY_PPO + ["--output_dir", str(tmp_path), "--max_steps", "1", "--seed", "3", "--temperature", "1.0",
                         "--reward_model_name_or_path", "tiny-gemma", "--algo", "grpo", "--num_samples_per_prompt",
                         "2", "--per_device_generation_batch_size", "2", *flags])
    return next(r for r in read_metrics(str(tmp_path)) if "loss/policy" in r)


def test_loss_agg_and_termination_reach_the_critic_free_loss(tmp_path, monkeypatch):
    """At ratio 1 the loss is −Â aggregated: token_mean weights each response by its length, seq_mean_token_mean
    does not, macro_mean under --ngram 3 weights it by its number of macros; each logged loss equals the loop's
    on the recorded rollout (advantages, masks, the rule's segments)."""
    from conftest import record_ppo_steps

    experiences = record_ppo_steps(monkeypatch)
    for agg, extra in (("token_mean", []), ("seq_mean_token_mean", []), ("macro_mean", ["--ngram", "3"])):
        row = critic_free_run(tmp_path / agg, monkeypatch, ["--loss_agg", agg, *extra])
        last = experiences[-1]
        lengths = last.action_mask.sum(dim=1)
        assert len(set(lengths.tolist())) > 1, "ragged responses expected"
        zeros = torch.zeros_like(last.advantages)
        expected = loop_loss(zeros, zeros, last.advantages.double(), last.action_mask.bool(), last.segment_ids,
                             "token", 0.2, 0.2, agg)
        assert row["loss/policy"] == pytest.approx(expected, rel=1e-5, abs=1e-7)
        if agg == "macro_mean":
            assert int(last.segment_ids.max()) >= 1  # --ngram 3 reached the segmentation of a critic-free run
        else:
            assert (last.segment_ids.max(dim=1).values <= 0).all()  # the default: one macro per response


def test_scale_rewards_and_overlong_penalty_reach_the_advantages(tmp_path, monkeypatch):
    """--scale_rewards none gives GRPO's advantages R − group mean; --overlong_buffer_len 4 --overlong_penalty 0.5
    subtracts DAPO's penalty of each response's length from its score before the return; --filter_groups runs
    (its metrics logged; the random reward model's scores are never equal, so it keeps the first samples)."""
    from conftest import record_ppo_steps

    experiences = record_ppo_steps(monkeypatch)
    critic_free_run(tmp_path / "plain", monkeypatch, ["--scale_rewards", "none"])
    shaped = critic_free_run(tmp_path / "shaped", monkeypatch, ["--scale_rewards", "none", "--overlong_buffer_len",
                                                                "4", "--overlong_penalty", "0.5", "--filter_groups"])
    assert shaped["filter/rounds"] >= 0 and "filter/constant_groups_first" in shaped  # dynamic sampling ran
    for experience, factor in zip(experiences, (0.0, 0.5)):
        mask = experience.action_mask.bool()
        returns = [float(r[m].sum()) for r, m in zip(experience.rewards.double(), mask)]
        advantages = [float(a[m][0]) for a, m in zip(experience.advantages, mask)]
        expected = [r - (returns[i - i % 2] + returns[i - i % 2 + 1]) / 2 for i, r in enumerate(returns)]
        assert advantages == pytest.approx(expected, rel=1e-4, abs=1e-5)
        lengths = mask.sum(dim=1).tolist()
        penalty = [-factor * min(max(n - 4, 0), 4) / 4 for n in lengths]
        assert any(p < 0 for p in penalty) or factor == 0.0
        assert experience.scores.tolist() == pytest.approx(
            [s + p for s, p in zip(experiences[0].scores.tolist(), penalty)], rel=1e-5, abs=1e-6)


def test_ratio_clip_and_aggregation_flags_reach_the_policy_loss(tmp_path, monkeypatch):
    """Two passes over the rollout (the second off-policy, ratio ≠ 1): every call of the policy loss gets
    --ratio, --clip_eps_high, --loss_agg and L = --max_new_tokens, and its value is the loop's on its inputs."""
    from dschat.rlhf import ppo_trainer

    real, calls = ppo_trainer.policy_loss, []

    def spy(logprobs, old_logprobs, advantages, action_mask, clip_eps, **kwargs):
        loss, stats = real(logprobs, old_logprobs, advantages, action_mask, clip_eps, **kwargs)
        calls.append((logprobs.detach().double(), old_logprobs.double(), advantages.double(), action_mask.bool(),
                      kwargs["segment_ids"], clip_eps, kwargs, loss.item()))
        return loss, stats

    monkeypatch.setattr(ppo_trainer, "policy_loss", spy)
    critic_free_run(tmp_path, monkeypatch, ["--ratio", "sequence_geo", "--clip_eps", "0.1", "--clip_eps_high", "0.3",
                                            "--loss_agg", "seq_mean_token_sum_norm", "--ppo_epochs", "2"])
    assert len(calls) == 2
    for new, old, advantages, mask, segments, eps, kwargs, loss in calls:
        assert (kwargs["ratio"], kwargs["clip_eps_high"], kwargs["loss_agg"], kwargs["norm_length"]) == \
            ("sequence_geo", 0.3, "seq_mean_token_sum_norm", 8)
        assert loss == pytest.approx(loop_loss(new, old, advantages, mask, segments, "sequence_geo", eps, 0.3,
                                               "seq_mean_token_sum_norm", norm=8), rel=1e-5, abs=1e-7)
    assert not torch.equal(calls[1][0], calls[1][1])  # the second pass is off-policy


def test_rollout_is_mode_and_agg_reach_the_correction(tmp_path, monkeypatch):
    """Every token's weight is e^SHIFT = e (test_rollout_correction's engine): a sequence of 8 tokens weighs e^8 as
    a product and e as a geometric mean; with --rollout_is_mode mask and the cap 2 every token weight is outside,
    so each is masked (weight 0, loss 0), where truncate gives 2; the per-level metrics say so."""
    from test_rollout_correction import SHIFT, run_with_shifted_engine

    geo = run_with_shifted_engine(tmp_path / "geo", monkeypatch, ["--rollout_is", "sequence", "--rollout_is_agg",
                                                                 "geo", "--rollout_is_cap", "1e6"])
    assert geo["rollout/is_weight_mean"] == pytest.approx(math.exp(SHIFT), rel=1e-4)
    assert geo["rollout/sequence/mismatch_kl_k1"] == pytest.approx(-SHIFT, rel=1e-4)
    assert geo["rollout/sequence/mismatch_kl_k3"] == pytest.approx(math.exp(SHIFT) - 1 - SHIFT, rel=1e-4)
    masked = run_with_shifted_engine(tmp_path / "mask", monkeypatch, ["--rollout_is", "token", "--rollout_is_mode",
                                                                     "mask", "--rollout_is_cap", "2"])
    assert masked["rollout/token/is_masked"] == 1.0 and masked["rollout/is_weight_mean"] == 0.0
    assert masked["loss/policy"] == 0.0
    truncated = run_with_shifted_engine(tmp_path / "trunc", monkeypatch, ["--rollout_is", "token",
                                                                         "--rollout_is_cap", "2"])
    assert truncated["rollout/token/is_masked"] == 0.0 and truncated["rollout/is_weight_mean"] == pytest.approx(2.0)
    raised = run_with_shifted_engine(tmp_path / "low", monkeypatch, ["--rollout_is", "token", "--rollout_is_low", "3",
                                                                    "--rollout_is_cap", "5"])
    assert raised["rollout/is_weight_mean"] == pytest.approx(3.0)  # e < 3: truncate raises it to --rollout_is_low


def resolved(*flags):
    from dschat.cli.ppo import build_parser
    from dschat.stages.resolve import resolve

    return resolve("ppo", build_parser().parse_config(["--reward_model_name_or_path", "tiny-gemma", "--output_dir",
                                                       "unused", *flags]), 1)


def test_ngram_1_set_in_a_config_file_stays_1_with_a_critic_free_algo(tmp_path):
    """``ngram: 1`` in a --config file (or a file it inherits) is set by the user as much as ``--ngram 1`` on the
    command line: GRPO keeps n = 1; a config that leaves --ngram out still resolves to one macro per response."""
    base, child = tmp_path / "base.yaml", tmp_path / "child.yaml"
    base.write_text("ngram: 1\n")
    child.write_text("inherit: base.yaml\nactor_learning_rate: 0.001\n")
    assert resolved("--config", str(base), "--algo", "grpo").ngram == 1
    assert resolved("--config", str(child), "--algo", "grpo").ngram == 1
    base.write_text("clip_eps: 0.1\n")
    assert resolved("--config", str(child), "--algo", "grpo").ngram is None  # n → ∞


def test_resolver_defaults_and_every_rule_with_a_critic_free_algo():
    """A critic-free --algo keeps one macro per response unless a rule or --ngram is given (then it cuts the units);
    the objective's defaults are filled in (ε_high = ε, the ratio's own aggregation, the algorithm's scaling), and
    resolving twice changes nothing; PPO keeps --ngram 1."""
    grpo = resolved("--algo", "grpo")
    assert (grpo.termination, grpo.ngram, grpo.loss_agg, grpo.clip_eps_high, grpo.scale_rewards) == \
        ("fixed", None, "token_mean", 0.2, "group")
    assert resolved("--algo", "grpo", "--ngram", "1").ngram == 1
    assert resolved("--algo", "rloo", "--ngram", "5").ngram == 5 and resolved("--algo", "rloo").scale_rewards == "none"
    assert resolved("--algo", "ppo").ngram == 1
    for rule in ("parsing", "ppl", "randomized", "entropy"):
        args = resolved("--algo", "reinforce", "--termination", rule, "--ratio", "macro_geo")
        assert (args.termination, args.loss_agg) == (rule, "macro_mean")
    from dschat.stages.resolve import resolve
    assert resolve("ppo", grpo, 1) == grpo


def test_the_asynchronous_producer_takes_the_new_correction_modes():
    """Staleness is corrected by the same machinery: --async_rollout with a masked, geometric macro correction
    resolves as given (the trainer reads the same fields whichever engine sampled)."""
    args = resolved("--algo", "grpo", "--async_rollout", "1", "--rollout_is", "macro", "--rollout_is_mode", "mask",
                    "--rollout_is_low", "0.5", "--rollout_is_agg", "geo", "--ratio", "macro_geo", "--termination",
                    "parsing")
    assert (args.rollout_is, args.rollout_is_mode, args.rollout_is_low, args.rollout_is_agg, args.loss_agg) == \
        ("macro", "mask", 0.5, "geo", "macro_mean")
