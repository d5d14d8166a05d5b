"""Termination rules ζ (paper §3.2.1, Appendix B.4): fixed n-gram, randomized n-gram, perplexity."""
import math
from collections import Counter

import pytest
import torch

import macro_oracle as oracle
from dschat.rlhf.macro_action import (SegmentationBatch, TerminationOptions, available_terminations,
                                      build_termination, macros_per_row, ngram_segments, ppl_segments,
                                      randomized_ngram_segments, shuffled_length_table, validate_segment_ids)

MASK = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]])


# ------------------------------------------------------------------ fixed n-gram
def test_fixed_ngram_hand_examples():
    assert ngram_segments(MASK, 2).tolist() == [[-1, -1, 0, 0, 1, 1, 2, -1], [0, 0, 1, -1, -1, -1, -1, -1], [-1] * 8]
    assert ngram_segments(MASK, 1).tolist()[0] == [-1, -1, 0, 1, 2, 3, 4, -1]
    whole = [[-1, -1, 0, 0, 0, 0, 0, -1], [0, 0, 0, -1, -1, -1, -1, -1], [-1] * 8]
    assert ngram_segments(MASK, None).tolist() == whole
    assert ngram_segments(MASK, 10).tolist() == whole  # n larger than the response
    # n dividing the response length: no duplicate / empty final macro
    assert macros_per_row(ngram_segments(MASK, 5)).tolist() == [1, 1, 0]
    assert ngram_segments(MASK.bool(), 5).tolist() == ngram_segments(MASK, 5).tolist()


def test_fixed_ngram_matches_oracle_and_counts():
    generator = torch.Generator().manual_seed(0)
    mask = oracle.random_action_mask(9, 31, generator)
    lengths = oracle.mask_lengths(mask)
    for n in (1, 2, 3, 5, 7, 40, None):
        segment_ids = ngram_segments(mask, n)
        validate_segment_ids(segment_ids, mask)
        assert segment_ids.tolist() == oracle.segment_ids(mask, oracle.fixed_ngram_segmentation(mask, n))
        expected_counts = [(math.ceil(k / n) if n else int(k > 0)) for k in lengths]
        assert macros_per_row(segment_ids).tolist() == expected_counts


@pytest.mark.parametrize("n", [0, -1, 2.5, True, "3"])
def test_fixed_ngram_rejects_bad_n(n):
    with pytest.raises(ValueError, match="ngram"):
        ngram_segments(MASK, n)
    with pytest.raises(ValueError, match="ngram"):
        build_termination("fixed", TerminationOptions(ngram=n))


def test_fixed_rule_through_registry():
    for name in ("fixed", "ngram"):
        result = build_termination(name, TerminationOptions(ngram=2))(SegmentationBatch(action_mask=MASK))
        assert torch.equal(result.segment_ids, ngram_segments(MASK, 2))
        assert result.fallback.tolist() == [False, False, False]
    whole = build_termination("fixed", TerminationOptions(ngram=None))(SegmentationBatch(action_mask=MASK))
    assert macros_per_row(whole.segment_ids).tolist() == [1, 1, 0]


# ------------------------------------------------------------------ randomized n-gram
def test_randomized_small_hand_example():
    # list (1, 2) once: each row uses [1, 2] or [2, 1]; the 2 tokens left after 3 are one final macro
    mask = torch.ones(40, 5, dtype=torch.long)
    generator = torch.Generator().manual_seed(3)
    rows = {tuple(row) for row in randomized_ngram_segments(mask, (1, 2), 1, generator).tolist()}
    assert rows == {(0, 1, 1, 2, 2), (0, 0, 1, 2, 2)}


def test_randomized_table_is_a_shuffle_of_the_repeated_list_per_sample():
    table = shuffled_length_table(16, generator=torch.Generator().manual_seed(0))
    assert table.shape == (16, 12)
    for row in table.tolist():
        assert Counter(row) == Counter({2: 3, 3: 3, 5: 3, 10: 3})
    assert len({tuple(row) for row in table.tolist()}) > 1, "each sample draws its own shuffle"
    again = shuffled_length_table(16, generator=torch.Generator().manual_seed(0))
    assert torch.equal(table, again)


def test_randomized_segments_consume_the_table_and_remainder_is_one_macro():
    # row 0: 70 tokens > 60 = sum of the list: 12 macros from the table, then one macro of the 10 left over
    mask = oracle.action_mask_from_spans([(3, 70), (0, 7), (10, 60), (5, 0)], 80)
    segment_ids = randomized_ngram_segments(mask, generator=torch.Generator().manual_seed(5))
    table = shuffled_length_table(4, generator=torch.Generator().manual_seed(5))
    validate_segment_ids(segment_ids, mask)
    lengths = [oracle.lengths_of_segment_ids(row) for row in segment_ids.tolist()]
    assert lengths[0] == table[0].tolist() + [10]
    assert lengths[2] == table[2].tolist()  # exactly the sum: no extra macro
    assert sum(lengths[1]) == 7 and lengths[1][:-1] == table[1].tolist()[:len(lengths[1]) - 1]
    assert lengths[1][-1] <= table[1, len(lengths[1]) - 1].item()  # the response ends inside this macro
    assert lengths[3] == []


def test_randomized_matches_oracle_on_random_batches():
    generator = torch.Generator().manual_seed(1)
    mask = oracle.random_action_mask(8, 90, generator)
    segment_ids = randomized_ngram_segments(mask, (2, 3), 4, torch.Generator().manual_seed(9))
    table = shuffled_length_table(8, (2, 3), 4, torch.Generator().manual_seed(9))
    assert segment_ids.tolist() == oracle.segment_ids(mask, oracle.table_segmentation(mask, table))


def test_randomized_rule_is_seeded_and_advances():
    batch = SegmentationBatch(action_mask=torch.ones(4, 50, dtype=torch.long))
    rule_a = build_termination("randomized", TerminationOptions(seed=7))
    rule_b = build_termination("randomized", TerminationOptions(seed=7))
    first = rule_a(batch).segment_ids
    assert torch.equal(first, rule_b(batch).segment_ids)
    assert not torch.equal(first, rule_a(batch).segment_ids)
    assert rule_a(batch).fallback.tolist() == [False] * 4


@pytest.mark.parametrize("lengths, repeat", [((), 3), ((2, 0), 3), ((2, 3), 0), ((2.5,), 1)])
def test_randomized_rejects_bad_arguments(lengths, repeat):
    with pytest.raises(ValueError, match="lengths|repeat"):
        randomized_ngram_segments(MASK, lengths, repeat)


# ------------------------------------------------------------------ perplexity
def test_ppl_hand_worked_running_mean():
    # NLL 2 | 1 (1 <= 2: joins, mean 1.5) | 3 (> 1.5: new macro) | 1.5 (<= 3, mean 2.25) | 1.5 (<= 2.25, mean 2)
    # | 4 (> 2: new macro) | 4 (<= 4: a tie does not raise the perplexity, joins)
    nll = [2.0, 1.0, 3.0, 1.5, 1.5, 4.0, 4.0]
    logprobs = torch.zeros(2, 10, dtype=torch.float64)
    logprobs[0, 1:8] = -torch.tensor(nll)
    logprobs[1, 3:10] = -torch.tensor(nll)  # same response, further right
    mask = oracle.action_mask_from_spans([(1, 7), (3, 7)], 10)
    logprobs[mask == 0] = -100.0  # prompt / padding log-probs must not matter
    assert ppl_segments(logprobs, mask).tolist() == [
        [-1, 0, 0, 1, 1, 1, 2, 2, -1, -1], [-1, -1, -1, 0, 0, 1, 1, 1, 2, 2]]


def test_ppl_satisfies_the_papers_inequalities():
    """§3.2.1: ppl(ω ∪ a_next) > ppl(ω) at every boundary, and the running ppl never rises inside a macro."""
    generator = torch.Generator().manual_seed(2)
    mask = oracle.random_action_mask(6, 40, generator)
    logprobs = -torch.rand(6, 40, generator=generator, dtype=torch.float64) * 3
    segment_ids = ppl_segments(logprobs, mask)
    validate_segment_ids(segment_ids, mask)
    for lp_row, ids_row, mask_row in zip(logprobs.tolist(), segment_ids.tolist(), mask.tolist()):
        positions = oracle.response_positions(mask_row)
        nll = [-lp_row[p] for p in positions]
        ids = [ids_row[p] for p in positions]
        for i in range(1, len(nll)):
            start = ids.index(ids[i - 1])
            macro = nll[start:i]
            mean_before, mean_after = sum(macro) / len(macro), (sum(macro) + nll[i]) / (len(macro) + 1)
            assert (ids[i] != ids[i - 1]) == (mean_after > mean_before)


def test_ppl_matches_oracle_and_float32():
    generator = torch.Generator().manual_seed(3)
    mask = oracle.random_action_mask(10, 33, generator)
    logprobs = -torch.rand(10, 33, generator=generator) * 4
    expected = oracle.segment_ids(mask, oracle.ppl_segmentation(logprobs, mask))
    assert ppl_segments(logprobs, mask).tolist() == expected
    assert ppl_segments(logprobs.double(), mask.bool()).tolist() == expected


def test_ppl_rule_through_registry_needs_ref_logprobs():
    logprobs = -torch.rand(3, 8, generator=torch.Generator().manual_seed(4))
    rule = build_termination("ppl", TerminationOptions())
    result = rule(SegmentationBatch(action_mask=MASK, ref_logprobs=logprobs))
    assert torch.equal(result.segment_ids, ppl_segments(logprobs, MASK))
    assert result.fallback.tolist() == [False] * 3
    with pytest.raises(ValueError, match="ref_logprobs"):
        rule(SegmentationBatch(action_mask=MASK))
    with pytest.raises(ValueError, match="logprobs"):
        ppl_segments(logprobs[:, :5], MASK)


def test_registry_names_and_unknown_rule():
    assert {"fixed", "ngram", "randomized", "ppl"} <= set(available_terminations())
    with pytest.raises(ValueError, match="--termination"):
        build_termination("bogus", TerminationOptions())


def test_bad_action_mask_shape():
    with pytest.raises(ValueError, match="action_mask"):
        ngram_segments(torch.ones(5), 2)


@pytest.mark.parametrize("parser,code,expected", [("auto", True, "code"), ("auto", False, "auto"),
                                                  ("spacy", True, "spacy"), ("benepar", False, "benepar")])
def test_parser_auto_parses_programs_as_code(parser, code, expected):
    """``--parser auto`` becomes the code parser when the responses are programs (step 3 passes
    ``code=--reward code``); a named parser stays as named; the seed is the one given."""
    from dschat.stages.configs import TerminationConfig

    options = TerminationConfig(parser=parser).termination_options(seed=11, code=code)
    assert (options.parser, options.seed) == (expected, 11)


@pytest.mark.parametrize("text,expected", [("0", None), ("inf", None), ("INF", None), ("none", None),
                                           ("None", None), ("1", 1), ("2", 2), ("12", 12)])
def test_ngram_flag_reads_a_length_or_the_whole_response(text, expected):
    """``--ngram``: a positive integer n, or 0 / inf / none for one macro per response (n → ∞, None)."""
    from dschat.cli.ppo import build_parser

    assert build_parser().parse_config(["--output_dir", "x", f"--ngram={text}"]).ngram == expected


@pytest.mark.parametrize("text", ["-1", "1.5", "five"])
def test_ngram_flag_refuses_other_values(text):
    from dschat.cli.ppo import build_parser
    from dschat.core.config import ConfigError

    with pytest.raises(ConfigError, match=f"--ngram {text}: expected a positive integer, or 0 / inf"):
        build_parser().parse_config(["--output_dir", "x", f"--ngram={text}"])
