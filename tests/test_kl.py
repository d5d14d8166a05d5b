"""Per-token KL estimators and per-token rewards (dschat.rlhf.kl)."""
import math

import pytest
import torch

import macro_oracle as oracle
from dschat.rlhf.kl import kl_penalty, last_response_index, token_rewards


def test_estimators_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    # log r = ref − logp = [−0.5, 1.0]
    assert kl_penalty(logprobs, ref, "k1")[0].tolist() == pytest.approx([0.5, -1.0])
    assert kl_penalty(logprobs, ref, "k2")[0].tolist() == pytest.approx([0.125, 0.5])
    assert kl_penalty(logprobs, ref, "k3")[0].tolist() == pytest.approx(
        [math.exp(-0.5) - 1 + 0.5, math.exp(1.0) - 1 - 1.0])
    assert kl_penalty(logprobs, ref).tolist() == kl_penalty(logprobs, ref, "k1").tolist()


def test_k2_k3_are_non_negative_and_zero_at_equality():
    generator = torch.Generator().manual_seed(0)
    logprobs, ref = -torch.rand(2, 4, 50, generator=generator)
    for estimator in ("k2", "k3"):
        assert (kl_penalty(logprobs, ref, estimator) >= 0).all()
        assert kl_penalty(logprobs, logprobs, estimator).abs().max() == 0


def test_bad_estimator_and_shapes():
    x = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="estimator"):
        kl_penalty(x, x, "k4")
    with pytest.raises(ValueError, match="ref_logprobs"):
        kl_penalty(x, torch.zeros(1, 2))
    with pytest.raises(ValueError, match="scores"):
        token_rewards(x, x, torch.zeros(2), torch.ones(1, 3), 0.1)
    with pytest.raises(ValueError, match="action_mask"):
        token_rewards(x, x, torch.zeros(1), torch.ones(3), 0.1)
    with pytest.raises(ValueError, match="reward_clip"):
        token_rewards(x, x, torch.zeros(1), torch.ones(1, 3), 0.1, reward_clip=0.0)


def test_last_response_index_any_padding_side():
    mask = oracle.action_mask_from_spans([(3, 5), (0, 2), (0, 8), (4, 0), (7, 1)], 8)
    assert last_response_index(mask).tolist() == [7, 1, 7, -1, 7]
    assert last_response_index(mask.bool()).tolist() == [7, 1, 7, -1, 7]
    assert last_response_index(torch.zeros(2, 0)).tolist() == [-1, -1]


def test_score_lands_on_the_last_response_token_by_hand():
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    logprobs = torch.full((3, 4), -1.0)
    ref = torch.full((3, 4), -1.5)  # k1 = 0.5 everywhere
    scores = torch.tensor([10.0, -1.0, 3.0])
    rewards, kl = token_rewards(logprobs, ref, scores, mask, kl_coef=0.1, reward_clip=5.0)
    expected = torch.tensor([[0, -0.05, -0.05 + 5.0, 0], [-0.05, -0.05, -0.05, -0.05 - 1.0], [0, 0, 0, 0]])
    assert torch.allclose(rewards, expected)
    assert torch.equal(kl, torch.tensor([[0, 0.5, 0.5, 0], [0.5] * 4, [0] * 4]))
    unclipped, _ = token_rewards(logprobs, ref, scores, mask, kl_coef=0.1, reward_clip=None)
    assert unclipped[0, 2].item() == pytest.approx(-0.05 + 10.0)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_token_rewards_match_oracle_on_ragged_batches(estimator):
    generator = torch.Generator().manual_seed(1)
    mask = oracle.random_action_mask(9, 27, generator)
    logprobs = -torch.rand(mask.shape, generator=generator, dtype=torch.float64) * 3
    ref = logprobs + torch.randn(mask.shape, generator=generator, dtype=torch.float64) * 0.3
    scores = torch.randn(9, generator=generator, dtype=torch.float64) * 4
    rewards, kl = token_rewards(logprobs, ref, scores, mask, 0.05, 2.5, estimator)
    expected = oracle.token_rewards(logprobs, ref, scores, mask, 0.05, 2.5, estimator)
    assert torch.allclose(rewards, torch.tensor(expected, dtype=torch.float64), atol=1e-12)
    assert kl[mask == 0].abs().sum() == 0 and torch.isfinite(rewards).all()
