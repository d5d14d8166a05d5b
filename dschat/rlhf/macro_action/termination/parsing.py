"""Parsing-based termination (paper §3.2.1 and Appendix B.4; code: Appendix D.2 and the review's APPS example).

For each response: decode it, parse it into a tree (:mod:`dschat.rlhf.macro_action.parsers`), and cut it by
the paper's depth-first rule:

1. walk the tree depth-first; a node covering fewer than ``cutoff`` (C, 5 in the paper) *policy* tokens is one
   macro action, a larger node is expanded into its children (a larger leaf — a long word or statement —
   stays one macro);
2. a macro of a single policy token joins the previous macro (the first macro of a response, the next one),
   so punctuation and keywords never stand alone.

Policy tokens are placed in the tree by character offsets (:mod:`..parsers.alignment`): a token belongs to
the node holding its first non-whitespace character. Tokens with no such character (whitespace, newline and
indentation tokens, a byte token holding back part of a multi-byte character, EOS) and tokens outside every
macro (text the parser ignores) join the *next* macro — a statement's indentation starts that statement's
macro — or, at the end of the response, the last one. So every response token gets exactly one macro, and
macros are contiguous and in order.

A response that cannot be aligned (its per-token pieces do not reproduce its decode) or parsed falls back to
token-level macros for that sample (``fallback[b] = True``, paper §B.4: "we revert to the standard PPO
method when discrepancies occur"). A response that is empty or only whitespace is one macro (or none).
"""
from __future__ import annotations

from bisect import bisect_left
from typing import List, Optional, Sequence, Tuple, Union

import torch

from ..parsers import TreeProvider, get_tree_provider
from ..parsers.alignment import anchors, text_decoder, token_pieces
from ..parsers.tree import Node
from ..segments import as_action_mask, check_same_shape, segments_from_lengths
from .base import Segmentation, SegmentationBatch, TerminationRule
from .options import TerminationOptions
from .registry import register_termination

Range = Tuple[int, int]


def dfs_macro_ranges(root: Node, positions: Sequence[int], cutoff: int) -> List[Range]:
    """Rule 1 of §B.4 over anchored tokens: ``positions`` are the sorted anchor offsets; returns the macros
    as ``[lo, hi)`` ranges of anchored-token indices in depth-first (left-to-right) order."""
    ranges: List[Range] = []
    stack = [root]
    while stack:
        node = stack.pop()
        lo, hi = bisect_left(positions, node.start), bisect_left(positions, node.end)
        if lo == hi:
            continue
        if hi - lo < cutoff or node.is_leaf:
            ranges.append((lo, hi))
        else:
            stack.extend(reversed(node.children))
    return ranges


def merge_single_token_macros(ranges: Sequence[Range]) -> List[Range]:
    """Rule 2 of §B.4: a one-token macro joins the previous macro (the first macro joins the next one).
    Overlapping ranges (siblings of a non-projective parse) are clipped so each token is counted once."""
    merged: List[Range] = []
    covered = 0
    for lo, hi in ranges:
        lo = max(lo, covered)
        if hi <= lo:
            continue
        covered = hi
        if hi - lo == 1 and merged:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    if len(merged) > 1 and merged[0][1] - merged[0][0] == 1:
        merged[:2] = [(merged[0][0], merged[1][1])]
    return merged


def tree_macro_lengths(root: Node, pieces: Sequence[str], cutoff: int) -> List[int]:
    """Macro lengths (in response tokens, summing to ``len(pieces)``) of one parsed response."""
    token_anchors = anchors(pieces)
    anchored = [token for token, anchor in enumerate(token_anchors) if anchor >= 0]
    ranges = merge_single_token_macros(dfs_macro_ranges(root, [token_anchors[t] for t in anchored], cutoff))
    # Macro k ends right after its last anchored token; unanchored / uncovered tokens go to the next macro.
    ends = [anchored[hi - 1] + 1 for _, hi in ranges[:-1]] + [len(pieces)]
    return [end - start for start, end in zip([0] + ends[:-1], ends)] if pieces else []


def _row_lengths(pieces: Optional[List[str]], tree: Optional[Node], needs_tree: bool, count: int,
                 cutoff: int) -> Tuple[List[int], bool]:
    """(macro lengths, fell back) for one response of ``count`` tokens."""
    if pieces is None or (needs_tree and tree is None):
        return [1] * count, True
    if not needs_tree:
        return ([count] if count else []), False
    return tree_macro_lengths(tree, pieces, cutoff), False


def parsing_segments(response_token_ids: torch.Tensor, action_mask: torch.Tensor, tokenizer,
                     provider: Union[TreeProvider, str] = "auto", cutoff: int = 5) -> Segmentation:
    """Parsing-based segmentation of a batch (module docstring): ``segment_ids [B, T]`` (-1 off the response)
    and ``fallback [B]``. ``provider`` is a tree provider or its name (``auto | spacy | benepar | code``).
    Any padding side; the CPU parse loops over samples (spaCy batches them), the result is one tensor."""
    if cutoff < 1:
        raise ValueError(f"parser_cutoff must be >= 1, got {cutoff}")
    if isinstance(provider, str):
        provider = get_tree_provider(provider)
    on = as_action_mask(action_mask)
    check_same_shape("response_token_ids", response_token_ids, on, "action_mask")
    decode = text_decoder(tokenizer)
    on_cpu, ids_cpu = on.cpu(), response_token_ids.cpu()
    rows = [ids_cpu[row][on_cpu[row]].tolist() for row in range(on.shape[0])]
    aligned = [token_pieces(ids, decode) for ids in rows]
    to_parse = [row for row, result in enumerate(aligned) if result is not None and result[0].strip()]
    trees = dict(zip(to_parse, provider.parse_many([aligned[row][0] for row in to_parse])))
    lengths, fallback = [], []
    for row, ids in enumerate(rows):
        pieces = aligned[row][1] if aligned[row] is not None else None
        row_lengths, fell_back = _row_lengths(pieces, trees.get(row), row in trees, len(ids), cutoff)
        lengths.append(row_lengths)
        fallback.append(fell_back)
    return Segmentation(segment_ids=segments_from_lengths(on, lengths),
                        fallback=torch.tensor(fallback, dtype=torch.bool, device=on.device))


@register_termination("parsing")
def build_parsing(options: TerminationOptions) -> TerminationRule:
    """The parsing rule with ``options.parser`` (``auto | spacy | benepar | code``) and C =
    ``options.parser_cutoff``. The tree provider is loaded here, once."""
    if options.parser_cutoff < 1:
        raise ValueError(f"parser_cutoff must be >= 1, got {options.parser_cutoff}")
    provider = get_tree_provider(options.parser)

    def rule(batch: SegmentationBatch) -> Segmentation:
        if batch.response_token_ids is None or batch.tokenizer is None:
            raise ValueError("the parsing termination needs response_token_ids and tokenizer in SegmentationBatch")
        return parsing_segments(batch.response_token_ids, batch.action_mask, batch.tokenizer, provider,
                                options.parser_cutoff)

    return rule
