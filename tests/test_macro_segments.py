"""Segment-id utilities, σ pooling, macro rewards and broadcast (dschat.rlhf.macro_action.segments)."""
import pytest
import torch

import macro_oracle as oracle
from dschat.rlhf.macro_action import (macro_rewards, macro_values, macros_per_row, ngram_segments,
                                      segment_sum, segments_from_lengths, sigma_weights, to_tokens,
                                      validate_segment_ids)

SIGMAS = ("equal", "unit", "position")


def as_tensor(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_sigma_hand_example_macro_of_three():
    segment_ids = torch.tensor([[-1, 0, 0, 0, -1]])
    values = torch.tensor([[9.0, 1.0, 2.0, 4.0, 9.0]], dtype=torch.float64)
    harmonic = 1 / 3 + 1 / 2 + 1
    assert harmonic == pytest.approx(11 / 6)
    expected = {
        "equal": 7 / 3,
        "unit": 4.0,
        "position": (1 * (1 / 3) + 2 * (1 / 2) + 4 * 1) / harmonic,  # = 32/11: last token weighs most
    }
    for sigma, value in expected.items():
        pooled, macro_mask = macro_values(values, segment_ids, sigma)
        assert pooled.shape == (1, 1) and macro_mask.tolist() == [[True]]
        assert pooled.item() == pytest.approx(value, abs=1e-12)
    weights = sigma_weights(segment_ids, "position", torch.float64)[0, 1:4]
    assert weights.tolist() == pytest.approx([(1 / 3) / harmonic, (1 / 2) / harmonic, 1 / harmonic])


def test_macro_rewards_sum_and_mean_by_hand():
    segment_ids = torch.tensor([[0, 0, 1, 1, 1, -1], [-1, -1, 0, 1, 1, 2]])
    rewards = as_tensor([[1, 2, 3, 4, 5, 100], [100, 100, 1, 2, 3, 4]])
    summed, mask = macro_rewards(rewards, segment_ids, "sum")
    averaged, _ = macro_rewards(rewards, segment_ids, "mean")
    assert mask.tolist() == [[True, True, False], [True, True, True]]
    assert summed.tolist() == [[3, 12, 0], [1, 5, 4]]
    assert averaged.tolist() == [[1.5, 4, 0], [1, 2.5, 4]]


def test_pooling_matches_oracle_on_random_segmentations():
    generator = torch.Generator().manual_seed(0)
    mask = oracle.random_action_mask(7, 23, generator)
    values, rewards = oracle.random_tensors(mask.shape, generator, 2)
    tables = torch.randint(1, 6, (7, 9), generator=generator)
    segmentations = [oracle.fixed_ngram_segmentation(mask, n) for n in (1, 2, 3, None)]
    segmentations.append(oracle.table_segmentation(mask, tables))
    for segmentation in segmentations:
        segment_ids = torch.tensor(oracle.segment_ids(mask, segmentation))
        for sigma in SIGMAS:
            pooled, macro_mask = macro_values(values, segment_ids, sigma)
            expected = oracle.macro_pooled(values, segmentation, mask, sigma)
            for row, row_expected in enumerate(expected):
                assert macro_mask[row].sum().item() == len(row_expected)
                assert pooled[row, :len(row_expected)].tolist() == pytest.approx(row_expected, abs=1e-12)
                assert pooled[row, len(row_expected):].abs().sum().item() == 0
        for agg in ("sum", "mean"):
            pooled, _ = macro_rewards(rewards, segment_ids, agg)
            expected = oracle.macro_pooled(rewards, segmentation, mask, None, agg)
            for row, row_expected in enumerate(expected):
                assert pooled[row, :len(row_expected)].tolist() == pytest.approx(row_expected, abs=1e-12)


def test_to_tokens_inverts_pooling_for_constant_segments():
    generator = torch.Generator().manual_seed(1)
    mask = oracle.random_action_mask(5, 17, generator)
    segment_ids = ngram_segments(mask, 3)
    per_macro = torch.randn(5, int(segment_ids.max()) + 1, generator=generator, dtype=torch.float64)
    tokens = to_tokens(per_macro, segment_ids)
    assert tokens[mask == 0].abs().sum().item() == 0
    for sigma in SIGMAS:
        pooled, macro_mask = macro_values(tokens, segment_ids, sigma)
        assert torch.allclose(to_tokens(pooled, segment_ids), tokens, atol=1e-12)
        assert torch.allclose(pooled[macro_mask], per_macro[macro_mask], atol=1e-12)
    assert torch.allclose(to_tokens(macro_rewards(tokens, segment_ids, "mean")[0], segment_ids), tokens)


def test_off_response_values_are_ignored_even_nan():
    segment_ids = torch.tensor([[-1, 0, 0, 1, -1]])
    values = torch.tensor([[float("nan"), 1.0, 3.0, 5.0, float("inf")]])
    for sigma in SIGMAS:
        pooled, _ = macro_values(values, segment_ids, sigma)
        assert torch.isfinite(pooled).all()


def test_batch_equals_per_sample():
    generator = torch.Generator().manual_seed(2)
    mask = oracle.random_action_mask(6, 19, generator)
    (values,) = oracle.random_tensors(mask.shape, generator, 1)
    segment_ids = ngram_segments(mask, 4)
    for sigma in SIGMAS:
        batched, _ = macro_values(values, segment_ids, sigma)
        for row in range(6):
            alone, alone_mask = macro_values(values[row:row + 1], segment_ids[row:row + 1], sigma)
            count = int(alone_mask.sum())
            assert torch.equal(alone[0, :count], batched[row, :count])


def test_empty_rows_and_empty_batch():
    segment_ids = torch.tensor([[-1, -1, -1], [-1, 0, 0]])
    values = torch.ones(2, 3)
    for sigma in SIGMAS:
        pooled, macro_mask = macro_values(values, segment_ids, sigma)
        assert macro_mask.tolist() == [[False], [True]] and torch.isfinite(pooled).all()
    assert macros_per_row(segment_ids).tolist() == [0, 1]
    nothing = torch.full((2, 3), -1)
    pooled, macro_mask = macro_values(values, nothing, "position")
    assert pooled.shape == (2, 1) and not macro_mask.any()
    assert to_tokens(pooled, nothing).abs().sum().item() == 0


def test_segments_from_lengths_hand_examples():
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0, 0, 0]])
    # shared table (2, 3): the 2 tokens left after 5 form one macro; row 1 ends inside the second macro
    assert segments_from_lengths(mask, torch.tensor([2, 3])).tolist() == [
        [-1, 0, 0, 1, 1, 1, 2, 2, -1], [0, 0, 1, -1, -1, -1, -1, -1, -1]]
    # ragged per-row lists
    assert segments_from_lengths(mask, [[1], [1, 1, 1, 1]]).tolist() == [
        [-1, 0, 1, 1, 1, 1, 1, 1, -1], [0, 1, 2, -1, -1, -1, -1, -1, -1]]
    with pytest.raises(ValueError, match="lengths"):
        segments_from_lengths(mask, torch.tensor([2, 0]))
    with pytest.raises(ValueError, match="lengths"):
        segments_from_lengths(mask, [[1]])


def test_validate_segment_ids():
    mask = torch.tensor([[0, 1, 1, 1, 0]])
    validate_segment_ids(torch.tensor([[-1, 0, 0, 1, -1]]), mask)
    validate_segment_ids(torch.tensor([[-1, 0, 1, 2, -1]]), mask.bool())
    bad = {
        "gap": [[-1, 0, 2, 2, -1]],
        "not starting at 0": [[-1, 1, 1, 2, -1]],
        "decreasing": [[-1, 0, 1, 0, -1]],
        "id off the response": [[0, 0, 1, 1, -1]],
        "-1 on the response": [[-1, 0, -1, 1, -1]],
    }
    for case, rows in bad.items():
        with pytest.raises(ValueError, match="segment_ids"):
            validate_segment_ids(torch.tensor(rows), mask)
    with pytest.raises(ValueError, match="shape"):
        validate_segment_ids(torch.tensor([[-1, 0, 0, 1]]), mask)


def test_bad_arguments_raise_value_error():
    segment_ids = torch.tensor([[0, 0, 1]])
    values = torch.ones(1, 3)
    with pytest.raises(ValueError, match="sigma"):
        macro_values(values, segment_ids, "median")
    with pytest.raises(ValueError, match="reward_agg"):
        macro_rewards(values, segment_ids, "max")
    with pytest.raises(ValueError, match="values"):
        macro_values(torch.ones(1, 4), segment_ids)
    with pytest.raises(ValueError, match="tokens"):
        segment_sum(torch.ones(2, 3), segment_ids)
    with pytest.raises(ValueError, match="macro"):
        to_tokens(torch.ones(1, 1), segment_ids)
