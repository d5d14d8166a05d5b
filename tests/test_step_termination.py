"""The step termination rule (``--termination step``): hand-written chains cut at their step delimiter, short steps
merged, against a cut computed here from the text's lines (or delimiter positions) and token offsets."""
from __future__ import annotations

import pytest
import torch

from dschat.rlhf.macro_action.termination import SegmentationBatch, TerminationOptions, build_termination
from dschat.rlhf.macro_action.termination.step import step_macro_lengths, step_segments


class PieceTokenizer:
    """A tokenizer whose token ``i`` is ``vocab[i]`` (token 0 is EOS, decoding to nothing)."""

    def __init__(self, vocab):
        self.vocab = list(vocab)

    def decode(self, ids, skip_special_tokens=True, clean_up_tokenization_spaces=False):
        return "".join(self.vocab[i] for i in ids if i != 0)


def expected_lengths(pieces, delimiter, min_tokens):
    """The cut computed independently: character offsets where each step ends (after each delimiter), the token
    whose span reaches that offset; then the macros, from the list of candidate cuts, keeping a cut only when the
    macro before it is long enough and something follows it; a short tail goes to the macro before."""
    text = "".join(pieces)
    ends = {i + len(delimiter) for i in range(len(text)) if text.startswith(delimiter, i)}
    token_end, cuts = 0, []
    for index, piece in enumerate(pieces):
        token_end += len(piece)
        if any(token_end - len(piece) < end <= token_end for end in ends):
            cuts.append(index + 1)
    macros, start = [], 0
    for cut in cuts:
        if cut - start >= min_tokens and cut < len(pieces):
            macros.append(cut - start)
            start = cut
    tail = len(pieces) - start
    if tail and tail < min_tokens and macros:
        macros[-1] += tail
    elif tail:
        macros.append(tail)
    return macros


CHAINS = [
    # one step a line, the answer line last
    ([" 27", " +", " 41", " =", " 68", "\n", "68", " -", " 13", " =", " 55", "\n", "Answer", ":", " 55"], "\n", 1,
     [6, 6, 3]),
    # a blank line (its own token) runs on into the next step once steps must have 2 tokens; the short last
    # step ("e") joins the one before
    (["a", " b", "\n", "\n", "c", " d", "\n", "e"], "\n", 2, [3, 5]),
    # a token holding two newlines ends one step; a short last step joins the one before
    (["x", "\n\n", "y", "\n", "z"], "\n", 2, [2, 3]),
    # a two-character delimiter split over two tokens: the token completing it ends the step
    (["Step", " one", ".", " ", "Step", " two", ".", " ", "Done"], ". ", 1, [4, 4, 1]),
    # no delimiter: one macro; an EOS token (empty piece) stays in the last step
    (["no", " steps", " here", ""], "\n", 1, [4]),
    # every step shorter than the minimum: one macro
    (["a", "\n", "b", "\n", "c"], "\n", 3, [5]),
]


@pytest.mark.parametrize("pieces, delimiter, min_tokens, lengths", CHAINS)
def test_hand_written_chains_cut_at_their_steps(pieces, delimiter, min_tokens, lengths):
    assert expected_lengths(pieces, delimiter, min_tokens) == lengths
    assert step_macro_lengths(pieces, delimiter, min_tokens) == lengths


def test_batch_rule_any_padding_side_and_the_registry_options():
    vocab = ["<eos>", " 1", " +", " 2", " =", " 3", "\n", "Answer", ":", "<pad>"]
    tokenizer = PieceTokenizer(vocab)
    row = [1, 2, 3, 4, 5, 6, 7, 8, 5, 0]  # " 1 + 2 = 3\nAnswer: 3" + EOS
    pad = 9
    ids = torch.tensor([[pad, pad] + row, row + [pad, pad]])
    mask = ids != pad
    rule = build_termination("step", TerminationOptions(step_min_tokens=2))
    segmentation = rule(SegmentationBatch(action_mask=mask, response_token_ids=ids, tokenizer=tokenizer))
    steps = [0] * 6 + [1] * 4
    assert segmentation.segment_ids.tolist() == [[-1, -1] + steps, steps + [-1, -1]]
    assert segmentation.fallback.tolist() == [False, False]
    merged = build_termination("step", TerminationOptions(step_min_tokens=7))(
        SegmentationBatch(action_mask=mask, response_token_ids=ids, tokenizer=tokenizer))
    assert merged.segment_ids[1].tolist() == [0] * 10 + [-1, -1]  # the 4-token answer step joins the first


def test_shipped_tokenizer_cuts_an_arithmetic_solution_at_its_lines():
    """On the tokenizer the arithmetic task trains with: the macros are the solution's lines, each macro's
    token span read from the tokenizer's own offsets (not from the rule's detokenisation)."""
    from dschat.data.arithmetic_task import split_problems
    from dschat.model import load_tokenizer

    tokenizer = load_tokenizer("tiny-gemma")
    text = split_problems("validation")[3].solution()
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    line_ends = [i + 1 for i, char in enumerate(text) if char == "\n"] + [len(text)]
    expected = [sum(1 for start, _ in encoded["offset_mapping"] if lo <= start < hi)
                for lo, hi in zip([0] + line_ends[:-1], line_ends)]
    ids = torch.tensor([encoded["input_ids"]])
    segmentation = step_segments(ids, torch.ones_like(ids, dtype=torch.bool), tokenizer, "\n", 4)
    assert torch.bincount(segmentation.segment_ids[0]).tolist() == expected
    assert len(expected) == text.count("\n") + 1 >= 6


def test_unaligned_response_falls_back_to_token_macros_and_bad_options_are_refused():
    class Broken(PieceTokenizer):
        def decode(self, ids, **kwargs):
            return "".join(reversed(super().decode(ids)))  # right to left: never the concatenation of its pieces

    ids = torch.tensor([[1, 2, 3]])
    segmentation = step_segments(ids, torch.ones_like(ids, dtype=torch.bool), Broken(["", "a", "\n", "b"]))
    assert segmentation.segment_ids.tolist() == [[0, 1, 2]] and segmentation.fallback.tolist() == [True]
    with pytest.raises(ValueError, match="step_min_tokens must be >= 1"):
        build_termination("step", TerminationOptions(step_min_tokens=0))
    with pytest.raises(ValueError, match="step_delimiter must be a non-empty"):
        build_termination("step", TerminationOptions(step_delimiter=""))
    with pytest.raises(ValueError, match="needs response_token_ids"):
        build_termination("step", TerminationOptions())(SegmentationBatch(action_mask=torch.ones(1, 2)))


def test_step_flags_reach_the_rule_options():
    """``--step_delimiter`` (escapes read) and ``--step_min_tokens`` reach the options step 3 and the viewer build
    the rule with (mutation: either dropped from ``termination_options``)."""
    from dschat.cli.ppo import build_parser

    args = build_parser().parse_config(["--output_dir", "x", "--termination", "step", "--step_delimiter", "\\n\\n",
                                        "--step_min_tokens", "7"])
    options = args.termination_options(seed=0)
    assert (options.step_delimiter, options.step_min_tokens) == ("\n\n", 7)
