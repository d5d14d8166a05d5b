"""Macro GAE, whitening, clipped losses and the trainer entry point, against the loop oracle and the
token-level PPO reference (tests/macro_oracle.py)."""
import itertools

import pytest
import torch

import macro_oracle as oracle
from dschat.rlhf.macro_action import (compute_macro_advantages, macro_gae, macros_per_row, masked_whiten,
                                      ngram_segments, policy_loss, ppl_segments, randomized_ngram_segments,
                                      shuffled_length_table, to_tokens, value_loss)

SIGMAS = ("equal", "unit", "position")
AGGS = ("sum", "mean")
GAMMA, LAM, CLIP, VALUE_CLIP = 0.99, 0.95, 0.2, 0.2


def t64(rows):
    return torch.tensor(rows, dtype=torch.float64)


def experience(mask, seed):
    """Random critic values, rewards and log-probs for a mask (float64); log-probs differ enough to clip."""
    generator = torch.Generator().manual_seed(seed)
    values, old_values, rewards = oracle.random_tensors(mask.shape, generator, 3)
    old_logprobs = -torch.rand(mask.shape, generator=generator, dtype=torch.float64) * 3
    logprobs = old_logprobs + torch.randn(mask.shape, generator=generator, dtype=torch.float64) * 0.15
    new_values = old_values + torch.randn(mask.shape, generator=generator, dtype=torch.float64) * 0.3
    return dict(values=values, old_values=old_values, new_values=new_values, rewards=rewards,
                logprobs=logprobs, old_logprobs=old_logprobs)


def padding_cases():
    generator = torch.Generator().manual_seed(11)
    return {
        "single": oracle.action_mask_from_spans([(4, 9)], 16),
        "left_padded_prompts": oracle.action_mask_from_spans([(2, 10), (5, 7), (0, 12)], 12),
        "right_padded_responses": oracle.action_mask_from_spans([(0, 3), (0, 12), (0, 7)], 12),
        "ragged_with_empty_row": oracle.random_action_mask(8, 21, generator),
    }


# ------------------------------------------------------------------ n = 1 is token-level PPO
@pytest.mark.parametrize("case", list(padding_cases()))
def test_one_gram_reproduces_token_level_ppo(case):
    mask = padding_cases()[case]
    data = experience(mask, seed=len(case))
    expected_adv, expected_ret = oracle.token_advantages(data["values"], data["rewards"], mask, GAMMA, LAM)
    expected_actor = oracle.token_actor_loss(data["logprobs"], data["old_logprobs"], expected_adv, mask, CLIP)
    expected_critic = oracle.token_critic_loss(data["new_values"], data["old_values"], expected_ret, mask,
                                               VALUE_CLIP)
    segment_ids = ngram_segments(mask, 1)
    for sigma, agg in itertools.product(SIGMAS, AGGS):
        advantages, returns, _ = compute_macro_advantages(data["values"], data["rewards"], segment_ids, mask,
                                                          sigma, agg, GAMMA, LAM)
        assert torch.allclose(advantages, t64(expected_adv), atol=1e-9, rtol=0)
        assert torch.allclose(returns, t64(expected_ret), atol=1e-9, rtol=0)
        for ratio in ("token", "macro"):
            loss, _ = policy_loss(data["logprobs"], data["old_logprobs"], advantages, mask, CLIP, segment_ids,
                                  ratio)
            assert loss.item() == pytest.approx(expected_actor, abs=1e-9)
        loss, _ = value_loss(data["new_values"], data["old_values"], returns, mask, VALUE_CLIP)
        assert loss.item() == pytest.approx(expected_critic, abs=1e-9)


def test_one_gram_in_float32_is_within_1e6_of_token_level_ppo():
    mask = padding_cases()["ragged_with_empty_row"]
    data = experience(mask, seed=3)
    expected_adv, expected_ret = oracle.token_advantages(data["values"], data["rewards"], mask, 1.0, LAM)
    advantages, returns, _ = compute_macro_advantages(data["values"].float(), data["rewards"].float(),
                                                      ngram_segments(mask, 1), mask, "position", "mean", 1.0, LAM)
    assert advantages.dtype == torch.float32
    assert torch.allclose(advantages.double(), t64(expected_adv), atol=1e-5, rtol=1e-6)
    assert torch.allclose(returns.double(), t64(expected_ret), atol=1e-5, rtol=1e-6)


# ------------------------------------------------------------------ vectorised == loop oracle
def segmentations(mask, logprobs):
    """(name, segment ids, oracle segmentation) for every rule."""
    cases = []
    for n in (2, 3, 5, None):
        cases.append((f"fixed-{n}", ngram_segments(mask, n), oracle.fixed_ngram_segmentation(mask, n)))
    table = shuffled_length_table(mask.shape[0], (2, 3, 5), 2, torch.Generator().manual_seed(4))
    randomized = randomized_ngram_segments(mask, (2, 3, 5), 2, torch.Generator().manual_seed(4))
    cases.append(("randomized", randomized, oracle.table_segmentation(mask, table)))
    cases.append(("ppl", ppl_segments(logprobs, mask), oracle.ppl_segmentation(logprobs, mask)))
    return cases


def test_vectorised_pipeline_matches_loop_oracle_for_every_rule_sigma_agg_and_ratio():
    generator = torch.Generator().manual_seed(5)
    mask = oracle.random_action_mask(7, 29, generator)
    data = experience(mask, seed=5)
    for name, segment_ids, segmentation in segmentations(mask, data["old_logprobs"]):
        assert segment_ids.tolist() == oracle.segment_ids(mask, segmentation), name
        for sigma, agg in itertools.product(SIGMAS, AGGS):
            advantages, returns, _ = compute_macro_advantages(data["values"], data["rewards"], segment_ids, mask,
                                                              sigma, agg, GAMMA, LAM)
            expected_adv, expected_ret = oracle.macro_advantages(data["values"], data["rewards"], mask,
                                                                 segmentation, sigma, agg, GAMMA, LAM)
            assert torch.allclose(advantages, t64(expected_adv), atol=1e-9, rtol=0), (name, sigma, agg)
            assert torch.allclose(returns, t64(expected_ret), atol=1e-9, rtol=0), (name, sigma, agg)
            for ratio in ("token", "macro"):
                loss, stats = policy_loss(data["logprobs"], data["old_logprobs"], advantages, mask, CLIP,
                                          segment_ids, ratio)
                expected_loss, expected_clipfrac = oracle.policy_loss(
                    data["logprobs"], data["old_logprobs"], expected_adv, mask, segmentation, CLIP, ratio)
                assert loss.item() == pytest.approx(expected_loss, abs=1e-9), (name, sigma, agg, ratio)
                assert stats["clipfrac"].item() == pytest.approx(expected_clipfrac, abs=1e-12)
            loss, _ = value_loss(data["new_values"], data["old_values"], returns, mask, VALUE_CLIP)
            expected = oracle.token_critic_loss(data["new_values"], data["old_values"], expected_ret, mask,
                                                VALUE_CLIP)
            assert loss.item() == pytest.approx(expected, abs=1e-9)


def test_some_ratios_are_clipped_in_the_oracle_comparison():
    mask = oracle.random_action_mask(7, 29, torch.Generator().manual_seed(5))
    data = experience(mask, seed=5)
    advantages, _, _ = compute_macro_advantages(data["values"], data["rewards"], ngram_segments(mask, 5), mask)
    for ratio in ("token", "macro"):
        _, stats = policy_loss(data["logprobs"], data["old_logprobs"], advantages, mask, CLIP,
                               ngram_segments(mask, 5), ratio)
        assert 0.0 < stats["clipfrac"].item() < 1.0


# ------------------------------------------------------------------ batch == per sample
def test_batch_results_equal_per_sample_results():
    generator = torch.Generator().manual_seed(6)
    mask = oracle.random_action_mask(6, 25, generator)
    data = experience(mask, seed=6)
    segment_ids = ngram_segments(mask, 3)
    advantages, returns, _ = compute_macro_advantages(data["values"], data["rewards"], segment_ids, mask,
                                                      "position", "sum", GAMMA, LAM)
    weighted = {"token": 0.0, "macro": 0.0}
    for row in range(mask.shape[0]):
        rows = slice(row, row + 1)
        alone_adv, alone_ret, _ = compute_macro_advantages(data["values"][rows], data["rewards"][rows],
                                                           segment_ids[rows], mask[rows], "position", "sum",
                                                           GAMMA, LAM)
        assert torch.allclose(alone_adv, advantages[rows], atol=1e-12, rtol=0)
        assert torch.allclose(alone_ret, returns[rows], atol=1e-12, rtol=0)
        units = {"token": mask[row].sum().item(), "macro": macros_per_row(segment_ids[rows]).item()}
        for ratio in weighted:
            loss, _ = policy_loss(data["logprobs"][rows], data["old_logprobs"][rows], alone_adv, mask[rows], CLIP,
                                  segment_ids[rows], ratio)
            weighted[ratio] += loss.item() * units[ratio]
    # token ratio: mean over the batch's response tokens; macro ratio: mean over the batch's macros
    totals = {"token": mask.sum().item(), "macro": macros_per_row(segment_ids).sum().item()}
    for ratio in weighted:
        loss, _ = policy_loss(data["logprobs"], data["old_logprobs"], advantages, mask, CLIP, segment_ids, ratio)
        assert loss.item() == pytest.approx(weighted[ratio] / totals[ratio], abs=1e-12)


# ------------------------------------------------------------------ macro GAE
def test_macro_gae_hand_example():
    # V = [1, 2], R = [0, 1], γ = 1, λ = 0.5: δ1 = 1 + 0 − 2 = −1, δ0 = 0 + 2 − 1 = 1,
    # Â1 = −1, Â0 = 1 + 0.5·(−1) = 0.5, Q̂ = Â + V = [1.5, 1]
    advantages, returns = macro_gae(t64([[1, 2]]), t64([[0, 1]]), torch.tensor([[True, True]]), 1.0, 0.5)
    assert advantages.tolist() == [[0.5, -1.0]]
    assert returns.tolist() == [[1.5, 1.0]]


def test_masked_macros_do_not_leak():
    values, rewards = t64([[1, 2, 3], [1, 2, 0]]), t64([[0, 1, 5], [0, 1, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    garbage_values, garbage_rewards = values.clone(), rewards.clone()
    garbage_values[1, 2], garbage_rewards[1, 2] = 1e6, float("nan")
    advantages, returns = macro_gae(garbage_values, garbage_rewards, mask, GAMMA, LAM)
    short_adv, short_ret = macro_gae(values[1:, :2], rewards[1:, :2], mask[1:, :2], GAMMA, LAM)
    assert torch.equal(advantages[1, :2], short_adv[0]) and torch.equal(returns[1, :2], short_ret[0])
    assert advantages[1, 2].item() == 0 and returns[1, 2].item() == 0
    expected_adv, expected_ret = oracle.gae([1, 2, 3], [0, 1, 5], GAMMA, LAM)
    assert advantages[0].tolist() == pytest.approx(expected_adv) and returns[0].tolist() == pytest.approx(expected_ret)


@pytest.mark.parametrize("gamma, lam", [(1.5, 0.9), (0.9, -0.1)])
def test_macro_gae_rejects_bad_discounts(gamma, lam):
    with pytest.raises(ValueError, match="gamma|lam"):
        macro_gae(t64([[1.0]]), t64([[1.0]]), torch.tensor([[True]]), gamma, lam)


def test_macro_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="macro_rewards"):
        macro_gae(t64([[1.0, 2.0]]), t64([[1.0]]), torch.tensor([[True, True]]))


# ------------------------------------------------------------------ degenerate rows
def test_rows_without_response_tokens_give_zeros_not_nan():
    mask = oracle.action_mask_from_spans([(2, 4), (0, 0), (1, 6)], 8)
    data = experience(mask, seed=8)
    for n in (1, 3, None):
        segment_ids = ngram_segments(mask, n)
        advantages, returns, stats = compute_macro_advantages(data["values"], data["rewards"], segment_ids, mask)
        assert torch.isfinite(advantages).all() and torch.isfinite(returns).all()
        assert advantages[1].abs().sum() == 0 and returns[1].abs().sum() == 0
        assert all(torch.isfinite(v) for v in stats.values())
        for ratio in ("token", "macro"):
            loss, stats = policy_loss(data["logprobs"], data["old_logprobs"], advantages, mask, CLIP, segment_ids,
                                      ratio)
            assert torch.isfinite(loss) and all(torch.isfinite(v) for v in stats.values())
    empty = torch.zeros(2, 5, dtype=torch.long)
    advantages, returns, stats = compute_macro_advantages(torch.ones(2, 5), torch.ones(2, 5),
                                                          ngram_segments(empty, 2), empty)
    assert advantages.abs().sum() == 0 and all(torch.isfinite(v) for v in stats.values())
    loss, _ = value_loss(torch.ones(2, 5), torch.ones(2, 5), returns, empty, VALUE_CLIP)
    assert loss.item() == 0


# ------------------------------------------------------------------ statistics
def test_macro_statistics_by_hand():
    mask = oracle.action_mask_from_spans([(0, 4), (2, 2), (0, 0)], 4)
    segment_ids = ngram_segments(mask, 2)  # macros: 2 + 1 + 0, 6 tokens
    values = torch.zeros(3, 4, dtype=torch.float64)
    rewards = t64([[0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0]])
    advantages, returns, stats = compute_macro_advantages(values, rewards, segment_ids, mask, gamma=1.0, lam=1.0)
    # γ = λ = 1, V = 0: every macro's advantage is the rest of the episode's reward
    assert advantages.tolist() == [[1, 1, 1, 1], [0, 0, 2, 2], [0, 0, 0, 0]]
    assert stats["macro_length_mean"].item() == pytest.approx(2.0)
    assert stats["macros_per_response"].item() == pytest.approx(1.5)  # 3 macros over the 2 real responses
    assert stats["advantage_l2"].item() == pytest.approx((2.0 + 8 ** 0.5) / 2)
    assert stats["return_l2"].item() == pytest.approx(stats["advantage_l2"].item())


# ------------------------------------------------------------------ losses
def test_macro_ratio_gradient_matches_finite_differences_of_the_oracle():
    mask = oracle.action_mask_from_spans([(1, 4), (0, 5)], 6)
    data = experience(mask, seed=9)
    segmentation = oracle.fixed_ngram_segmentation(mask, 2)
    segment_ids = ngram_segments(mask, 2)
    advantages = to_tokens(t64([[0.7, -1.2, 0.0], [-0.4, 0.9, 1.5]]), segment_ids)
    logprobs = data["logprobs"].clone().requires_grad_(True)
    loss, _ = policy_loss(logprobs, data["old_logprobs"], advantages, mask, CLIP, segment_ids, "macro")
    loss.backward()
    step = 1e-6
    for row, position in itertools.product(range(2), range(6)):
        plus, minus = data["logprobs"].clone(), data["logprobs"].clone()
        plus[row, position] += step
        minus[row, position] -= step
        numeric = (oracle.policy_loss(plus, data["old_logprobs"], advantages, mask, segmentation, CLIP, "macro")[0]
                   - oracle.policy_loss(minus, data["old_logprobs"], advantages, mask, segmentation, CLIP,
                                        "macro")[0]) / (2 * step)
        assert logprobs.grad[row, position].item() == pytest.approx(numeric, abs=1e-6)
    assert logprobs.grad[mask == 0].abs().sum() == 0


def test_macro_ratio_of_a_long_macro_is_finite_and_exact_where_the_objective_is_not_flat():
    """A macro whose summed log-ratio is 1000 (exp overflows even float64): finite loss and gradients; with
    Â > 0 the value is the clipped term's exactly. In the normal range the loss and its gradient equal the
    uncapped oracle's to 1e-12 (float64)."""
    mask = torch.ones(2, 4, dtype=torch.long)
    segment_ids = torch.zeros(2, 4, dtype=torch.long)  # one 4-token macro per row
    old = torch.zeros(2, 4, dtype=torch.float64)
    for advantage in (1.5, -1.5):
        logprobs = torch.full((2, 4), 250.0, dtype=torch.float64, requires_grad=True)
        advantages = torch.full((2, 4), advantage, dtype=torch.float64)
        loss, stats = policy_loss(logprobs, old, advantages, mask, CLIP, segment_ids, "macro")
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logprobs.grad).all() and torch.isfinite(stats["ratio_mean"])
        if advantage > 0:
            assert loss.item() == -advantage * (1 + CLIP) and logprobs.grad.abs().sum() == 0
    generator = torch.Generator().manual_seed(3)
    mask = oracle.random_action_mask(6, 20, generator)
    data = experience(mask, seed=3)
    segment_ids = ngram_segments(mask, 10)
    segmentation = oracle.fixed_ngram_segmentation(mask, 10)
    advantages = to_tokens(torch.randn(6, 2, generator=generator, dtype=torch.float64), segment_ids) * mask
    logprobs = (data["old_logprobs"] + torch.randn(mask.shape, generator=generator, dtype=torch.float64)
                ).requires_grad_(True)  # macro log-ratios up to ~±8: clipped and unclipped macros alike
    reference = logprobs.detach().clone().requires_grad_(True)
    loss, _ = policy_loss(logprobs, data["old_logprobs"], advantages, mask, CLIP, segment_ids, "macro")
    loss.backward()
    oracle_loss = oracle.policy_loss(logprobs.detach(), data["old_logprobs"], advantages, mask, segmentation, CLIP,
                                     "macro")[0]
    assert loss.item() == pytest.approx(oracle_loss, abs=1e-12, rel=0)
    # the uncapped formula, macro by macro with autograd: same gradient
    terms = []
    for row in range(mask.shape[0]):
        for macro in segment_ids[row][segment_ids[row] >= 0].unique():
            on = segment_ids[row] == macro
            r = torch.exp((reference[row][on] - data["old_logprobs"][row][on]).sum())
            advantage = advantages[row][on].mean()
            terms.append(torch.max(-advantage * r, -advantage * r.clamp(1 - CLIP, 1 + CLIP)))
    torch.stack(terms).mean().backward()
    assert torch.allclose(logprobs.grad, reference.grad, atol=1e-12, rtol=0)


def test_policy_loss_stats_and_hand_values():
    mask = torch.tensor([[1, 1]])
    logprobs, old = t64([[0.0, 0.0]]), t64([[0.0, -0.5]])  # token ratios 1 and e^0.5 ≈ 1.65
    advantages = t64([[1.0, 1.0]])
    loss, stats = policy_loss(logprobs, old, advantages, mask, 0.2)
    assert loss.item() == pytest.approx(-(1.0 + 1.2) / 2)
    assert stats["clipfrac"].item() == pytest.approx(0.5)
    ratio = torch.exp(torch.tensor(0.5, dtype=torch.float64)).item()
    assert stats["approx_kl"].item() == pytest.approx(((ratio - 1) - 0.5) / 2)
    loss, stats = policy_loss(logprobs, old, advantages, mask, 0.2, torch.tensor([[0, 0]]), "macro")
    assert loss.item() == pytest.approx(-1.2) and stats["clipfrac"].item() == 1.0


def test_value_loss_clipping_by_hand():
    mask = torch.tensor([[1, 1, 0]])
    values, old, returns = t64([[1.0, 0.0, 9.0]]), t64([[0.0, 0.0, 0.0]]), t64([[2.0, 1.0, 0.0]])
    loss, stats = value_loss(values, old, returns, mask, 0.5)
    # token 0: max((1−2)², (0.5−2)²) = 2.25; token 1: 1; 0.5·mean = 0.8125
    assert loss.item() == pytest.approx(0.8125) and stats["clipfrac"].item() == pytest.approx(0.5)
    assert value_loss(values, old, returns, mask, None)[0].item() == pytest.approx(0.5)


def test_loss_argument_errors():
    mask = torch.ones(1, 3, dtype=torch.long)
    x = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="segment_ids"):
        policy_loss(x, x, x, mask, CLIP, ratio="macro")
    with pytest.raises(ValueError, match="ratio"):
        policy_loss(x, x, x, mask, CLIP, ratio="sequence")
    with pytest.raises(ValueError, match="clip_eps"):
        policy_loss(x, x, x, mask, 0.0)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(x, x, torch.zeros(1, 2), mask, CLIP)
    with pytest.raises(ValueError, match="value_clip"):
        value_loss(x, x, x, mask, -1.0)
    with pytest.raises(ValueError, match="returns"):
        value_loss(x, x, torch.zeros(2, 3), mask, 0.2)
    with pytest.raises(ValueError, match="segment_ids"):
        compute_macro_advantages(x, x, torch.tensor([[0, 2, 2]]), mask)
    with pytest.raises(ValueError, match="sigma"):
        compute_macro_advantages(x, x, torch.tensor([[0, 1, 1]]), mask, sigma="max")


# ------------------------------------------------------------------ whitening
def test_masked_whiten_matches_oracle():
    generator = torch.Generator().manual_seed(10)
    mask = oracle.random_action_mask(5, 13, generator)
    (x,) = oracle.random_tensors(mask.shape, generator, 1, scale=3.0)
    x[mask == 0] = 1e3  # off-response entries must not influence the statistics
    for shift_mean in (True, False):
        expected = t64(oracle.masked_whiten(x, mask, shift_mean))
        assert torch.allclose(masked_whiten(x, mask, shift_mean), expected, atol=1e-12)
    whitened = masked_whiten(x, mask)
    on = mask.bool()
    assert whitened[on].mean().item() == pytest.approx(0.0, abs=1e-12)
    assert whitened[on].var(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)
    assert whitened[~on].abs().sum() == 0
