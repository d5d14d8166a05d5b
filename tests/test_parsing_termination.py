"""Parsing-based termination (paper §3.2.1, Appendix B.4): tree providers, char alignment, the DFS rule, batches.

Expected cuts are derived by hand in the comments from the parse trees and the tiny tokenizer's tokens
(tests/fixtures/parsing/tiny_tokenizer.py: every word of its corpus is one token ``Ġword``, punctuation is
its own token).
"""
from __future__ import annotations

import pytest
import torch

from dschat.rlhf.macro_action.parsers import PARSERS, get_tree_provider, resolve_parser_name
from dschat.rlhf.macro_action.parsers.alignment import anchors, char_spans, text_decoder, token_pieces
from dschat.rlhf.macro_action.parsers.benepar_tree import (BeneparTreeProvider, benepar_model_installed,
                                                           tree_from_nltk)
from dschat.rlhf.macro_action.parsers.code_tree import CodeTreeProvider, ast_tree, redbaron_tree
from dschat.rlhf.macro_action.parsers.tree import Node, ParseError, branch, leaf, leaves
from dschat.rlhf.macro_action.segments import validate_segment_ids
from dschat.rlhf.macro_action.termination import TerminationOptions, build_termination, SegmentationBatch
from dschat.rlhf.macro_action.termination.parsing import (dfs_macro_ranges, merge_single_token_macros,
                                                          parsing_segments)
from tests.fixtures.parsing.tiny_tokenizer import build_tiny_tokenizer

FOX = "The quick brown fox jumps over the lazy dog."
REVIEW_TEXT = ("20M, moved to Europe, met some people but they quickly disappeared, want to celebrate, but I'm "
               "still alone, would it seem weird or desperate if I go out alone?")
REVIEW_CODE = ("def queue_time(customers, n):\n    tills = [0] * n\n    for i in range(len(customers)):\n"
               "        tills[i % n] += customers[i]\n    return max(tills)\n")
NEW_SYNTAX = ("def f(a, /, b):\n    if (n := a) > 1:\n        return n\n    match b:\n        case 1:\n"
              "            return 2\n        case _:\n            return 3\n")


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def spacy_provider():
    return get_tree_provider("spacy")


@pytest.fixture(scope="module")
def code_provider():
    return get_tree_provider("code")


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def macros(tok, text, provider, cutoff=5, extra_ids=()):
    """(macro texts, fallback) of ``text`` as one response."""
    ids = ids_of(tok, text) + list(extra_ids)
    seg = parsing_segments(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool), tok, provider, cutoff)
    validate_segment_ids(seg.segment_ids, torch.ones(1, len(ids), dtype=torch.bool))
    pieces = token_pieces(ids, text_decoder(tok))[1]
    out = []
    for piece, segment in zip(pieces, seg.segment_ids[0].tolist()):
        out += [""] * (segment + 1 - len(out))
        out[segment] += piece
    return out, bool(seg.fallback[0])


# --- text (spaCy dependency parse → phrase tree) ------------------------------------------------------------

def test_spacy_parse_of_fox_is_the_one_the_expected_cuts_assume(spacy_provider):
    doc = spacy_provider.nlp(FOX)
    assert [(t.text, t.head.i) for t in doc] == [
        ("The", 3), ("quick", 3), ("brown", 3), ("fox", 4), ("jumps", 4), ("over", 4), ("the", 8), ("lazy", 8),
        ("dog", 5), (".", 4)]


@pytest.mark.parametrize("cutoff, expected", [
    # Tree (head-outward binarisation): S = [NP (The (quick (brown fox)))] + [X ((jumps PP) .)],
    # PP = (over (the (lazy dog))). Policy tokens: one per word and '.', 10 in all.
    # C=5: S(10) expands; NP(4) < 5 is a macro; X(6) expands; (jumps PP)(5) expands: 'jumps'(1) joins the
    #      previous macro, PP(4) is a macro, '.'(1) joins it.
    (5, ["The quick brown fox jumps", " over the lazy dog."]),
    # C=6: NP(4) macro; X(6) expands; (jumps PP)(5) < 6 is a macro; '.' joins it.
    (6, ["The quick brown fox", " jumps over the lazy dog."]),
    # C=3: NP(4) expands: 'The'(1) is the first macro, '(quick (brown fox))'(3) expands: 'quick' joins 'The',
    #      '(brown fox)'(2) is a macro; then 'jumps', 'over', 'the' (singles inside expanded nodes) join it;
    #      '(lazy dog)'(2) is a macro and '.' joins it.
    (3, ["The quick", " brown fox jumps over the", " lazy dog."]),
])
def test_spacy_hand_derived_cuts(tok, spacy_provider, cutoff, expected):
    assert macros(tok, FOX, spacy_provider, cutoff) == (expected, False)


def test_spacy_review_example_close_to_the_papers_constituency_cut(tok, spacy_provider):
    # Review discussion (benepar, C=5): "20M,@@ moved to Europe,@@ met some people but they quickly disappeared,@@
    # want to celebrate, but@@ I'm still alone, would it seems@@ weird or desperate if@@ I go out alone?@@".
    # The dependency approximation differs only in two places ("quickly@@ disappeared", "it@@ seem").
    assert macros(tok, REVIEW_TEXT, spacy_provider)[0] == [
        "20M,", " moved to Europe,", " met some people but they quickly", " disappeared,",
        " want to celebrate, but", " I'm still alone, would it", " seem weird or desperate if",
        " I go out alone?"]


# --- code (ast / RedBaron statement trees) --------------------------------------------------------------------

def test_code_review_example_statement_level_cuts(tok, code_provider):
    # Review discussion, APPS, parsing-based termination: one macro per statement, the def/for headers alone.
    # The newline + indentation tokens before a statement start that statement's macro; the final newline
    # joins the last macro.
    assert macros(tok, REVIEW_CODE, code_provider) == ([
        "def queue_time(customers, n):", "\n    tills = [0] * n", "\n    for i in range(len(customers)):",
        "\n        tills[i % n] += customers[i]", "\n    return max(tills)\n"], False)


def test_code_new_syntax_parsed_by_ast_where_redbaron_fails(tok, code_provider):
    for source in (NEW_SYNTAX, "async def g(y):\n    return [x async for x in y]\n"):
        with pytest.raises(ParseError):
            redbaron_tree(source)
        assert ast_tree(source).children
    # Every compound node has >= 5 tokens and expands; 'case 1:'(4) + 'return 2'(3) = 7 expands too.
    assert macros(tok, NEW_SYNTAX, code_provider) == ([
        "def f(a, /, b):", "\n    if (n := a) > 1:", "\n        return n", "\n    match b:", "\n        case 1:",
        "\n            return 2", "\n        case _:", "\n            return 3\n"], False)


def test_code_tree_shape_headers_clauses_comments():
    source = ("@dec\ndef f(x):  # doc\n    try:\n        y = 1\n    except E:\n        y = 2\n    else:\n"
              "        y = 3\n    # done\n    return y\n")
    texts = [source[node.start:node.end] for node in leaves(ast_tree(source))]
    assert texts == ["@dec\ndef f(x):  # doc", "try:", "y = 1", "except E:", "y = 2", "else:", "y = 3",
                     "# done", "return y"]


def test_redbaron_and_ast_give_the_same_statement_tree():
    # Two if/else blocks in one body: RedBaron's own rendering of bodies goes wrong here, spans must not.
    source = ("import sys\n\n@dec\nclass A(B):\n    def f(self, x):  # doc\n        if x:\n            y = 1\n"
              "        else:\n            y = 2\n        if y:\n            y = 3\n        else:\n            y = 4\n"
              "        for i in x:\n            pass\n        else:\n            z = 0\n        try:\n"
              "            z = 1 / y\n        except ZeroDivisionError as e:\n            z = 0\n        else:\n"
              "            z += 1\n        finally:\n            w = 2\n        while z:\n"
              "            z //= 2  # halve\n"
              "        with open(sys.argv[1]) as f:\n            return f.read()\n")
    red, tree = redbaron_tree(source), ast_tree(source)
    assert [(n.start, n.end) for n in leaves(red)] == [(n.start, n.end) for n in leaves(tree)]
    assert [source[n.start:n.end] for n in leaves(tree)][:6] == [
        "import sys", "@dec\nclass A(B):", "def f(self, x):  # doc", "if x:", "y = 1", "else:"]


def test_code_python2_goes_through_redbaron(tok, code_provider):
    source = 'print "hello"\nx = `y`\n'
    with pytest.raises(SyntaxError):
        ast_tree(source)
    tree = redbaron_tree(source)
    assert [source[n.start:n.end] for n in leaves(tree)] == ['print "hello"', "x = `y`"]
    assert macros(tok, source, code_provider) == (['print "hello"', "\nx = `y`\n"], False)


def test_code_truncated_response_keeps_its_parsable_prefix(tok, code_provider):
    assert macros(tok, "x = 1\nfor i in range(len(cust", code_provider) == (
        ["x = 1", "\nfor i in range(len(cust"], False)


def test_code_unparseable_falls_back_to_token_level(tok, code_provider):
    text = "def f(:\n  return )\n"
    out, fell_back = macros(tok, text, code_provider)
    assert fell_back and len(out) == len(ids_of(tok, text))
    with pytest.raises(ParseError):
        code_provider.parse(text)


def test_ast_columns_are_utf8_bytes_converted_to_characters(tok, code_provider):
    source = 's = "日本"; t = 1\n'
    assert [source[n.start:n.end] for n in leaves(ast_tree(source))] == ['s = "日本"', ";", "t = 1"]
    assert macros(tok, source, code_provider) == (['s = "日本";', " t = 1\n"], False)


# --- alignment ----------------------------------------------------------------------------------------------

def test_alignment_multibyte_and_newlines(tok):
    text = "café ☕ 日本\n\n  The cat\nsleeps."
    ids = ids_of(tok, text)
    decoded, pieces = token_pieces(ids, text_decoder(tok))
    assert decoded == text and "".join(pieces) == text and len(pieces) == len(ids)
    assert "" in pieces  # byte tokens holding back part of a character
    assert all("\ufffd" not in piece for piece in pieces)
    spans = char_spans(pieces)
    assert all(text[start:end] == piece for (start, end), piece in zip(spans, pieces))
    offsets = anchors(pieces)
    assert all(anchor == -1 or not text[anchor].isspace() for anchor in offsets)
    # no drift after the newlines: the tokens starting these words are anchored exactly at them
    assert {text.index(" The") + 1, text.index("cat"), text.index("sleeps")} <= set(offsets)


def test_alignment_multibyte_text_is_segmented_whole(tok, spacy_provider):
    text = "The café sleeps.\n\nMy cat ☕ sleeps on the warm red mat."
    out, fell_back = macros(tok, text, spacy_provider)
    assert not fell_back and "".join(out) == text
    assert all("\ufffd" not in macro for macro in out)


def test_alignment_mismatch_is_reported():
    assert token_pieces([1, 2], lambda ids: "ab" if len(ids) == 2 else "x") is None


def test_eos_and_whitespace(tok, spacy_provider):
    out, fell_back = macros(tok, FOX, spacy_provider, extra_ids=[tok.eos_token_id])
    assert out == ["The quick brown fox jumps", " over the lazy dog."] and not fell_back  # EOS joins the last
    assert macros(tok, "  \n ", spacy_provider) == (["  \n "], False)


# --- the DFS rule on hand-built trees ------------------------------------------------------------------------

def test_dfs_and_single_token_merge_on_a_hand_built_tree():
    # Text "a bb c d e" with one token per word; tree ((a (bb c)) (d e)) at C=3.
    positions = [0, 2, 5, 7, 9]
    tree = branch([branch([leaf(0, 1), branch([leaf(2, 4), leaf(5, 6)])]), branch([leaf(7, 8), leaf(9, 10)])])
    assert dfs_macro_ranges(tree, positions, 3) == [(0, 1), (1, 3), (3, 5)]
    assert merge_single_token_macros([(0, 1), (1, 3), (3, 5)]) == [(0, 3), (3, 5)]  # first single → next
    assert merge_single_token_macros([(0, 2), (2, 3), (3, 4), (4, 6)]) == [(0, 4), (4, 6)]  # singles → previous
    assert merge_single_token_macros([(0, 3), (2, 5)]) == [(0, 3), (3, 5)]  # overlap clipped
    assert dfs_macro_ranges(leaf(0, 10), positions, 3) == [(0, 5)]  # a big leaf stays one macro


# --- benepar ----------------------------------------------------------------------------------------------------

def test_tree_from_nltk_maps_leaves_by_position():
    nltk = pytest.importorskip("nltk")
    text = "The (cat) sleeps."
    tree = nltk.Tree.fromstring("(S (NP (DT The) (-LRB- -LRB-) (NN cat) (-RRB- -RRB-)) (VP (VBZ sleeps)) (. .))")
    spans = [(0, 3), (4, 5), (5, 8), (8, 9), (10, 16), (16, 17)]
    root = tree_from_nltk(tree, spans)
    assert [text[n.start:n.end] for n in root.children] == ["The (cat)", "sleeps", "."]
    assert [(n.start, n.end, n.label) for n in leaves(root)][:2] == [(0, 3, "DT"), (4, 5, "-LRB-")]
    with pytest.raises(ParseError):
        tree_from_nltk(tree, spans[:-1])
    with pytest.raises(ParseError):
        tree_from_nltk(tree, spans + [(18, 19)])


@pytest.fixture(scope="module")
def untrained_benepar(tmp_path_factory):
    """An untrained benepar ChartParser (char-LSTM, tiny), saved as a checkpoint benepar can load by path."""
    pytest.importorskip("benepar")
    from benepar import nkutil
    from benepar.parse_chart import ChartParser

    hparams = nkutil.HParams(
        d_model=16, use_chars_lstm=True, use_pretrained=False, d_char_emb=8, char_lstm_input_dropout=0.0,
        use_encoder=True, d_label_hidden=8, predict_tags=False, force_root_constituent=True,
        pretrained_model=None, morpho_emb_dropout=0.0, encoder_max_len=512, num_heads=2, d_kv=8, d_ff=16,
        relu_dropout=0.0, residual_dropout=0.0, attention_dropout=0.0, num_layers=1, d_tag_hidden=8,
        tag_loss_scale=1.0)
    chars = {"\0": 0, "\1": 1, "\2": 2, "\3": 3, "\4": 4}
    for code in range(256):
        chars.setdefault(chr(code), len(chars))
    torch.manual_seed(0)
    parser = ChartParser(tag_vocab={"UNK": 0}, label_vocab={"": 0, "S": 1, "NP": 2, "VP": 3, "PP": 4},
                         char_vocab=chars, hparams=hparams)
    path = tmp_path_factory.mktemp("benepar") / "untrained.pt"
    torch.save({"config": parser.config, "state_dict": parser.state_dict()}, path)
    return str(path)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch_struct, inside benepar
def test_benepar_provider_with_an_untrained_parser(tok, untrained_benepar):
    provider = BeneparTreeProvider(model=untrained_benepar)
    text = "The quick brown fox jumps over the lazy dog.\n\nMy cat sleeps."
    tree = provider.parse(text)
    words = [text[n.start:n.end] for n in leaves(tree)]
    assert words == ["The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", ".", "My", "cat",
                     "sleeps", "."]
    assert len(tree.children) == 2  # one constituency tree per sentence
    out, fell_back = macros(tok, text, provider)
    assert not fell_back and "".join(out) == text


def test_provider_names():
    assert PARSERS == ("auto", "spacy", "benepar", "code")
    assert resolve_parser_name("auto") == ("benepar" if benepar_model_installed() else "spacy")
    with pytest.raises(ValueError, match="--parser 'nope' is unknown"):
        get_tree_provider("nope")
    if not benepar_model_installed():
        with pytest.raises(ValueError, match="--parser benepar: benepar's model benepar_en3 is not installed"):
            BeneparTreeProvider()  # a ValueError: run_cli's one line, exit 2, never a traceback


# --- batches, padding, registry ----------------------------------------------------------------------------------

def _padded_batch(tok, responses, side):
    """[B, T] ids and mask with a 2-token prompt per row (mask 0) and padding on ``side``."""
    rows = [[5, 6] + ids_of(tok, text) for text in responses]
    width = max(len(row) for row in rows) + 1
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for index, row in enumerate(rows):
        offset = 0 if side == "right" else width - len(row)
        ids[index, offset:offset + len(row)] = torch.tensor(row)
        mask[index, offset + 2:offset + len(row)] = True
    return ids, mask


@pytest.mark.parametrize("side", ["left", "right"])
def test_batch_equals_per_sample_with_padding(tok, code_provider, side):
    responses = [REVIEW_CODE, "def f(:\n  return )\n", "", "  \n", NEW_SYNTAX]
    ids, mask = _padded_batch(tok, responses, side)
    seg = parsing_segments(ids, mask, tok, code_provider)
    validate_segment_ids(seg.segment_ids, mask)
    assert seg.fallback.tolist() == [False, True, False, False, False]
    for row, text in enumerate(responses):
        single = ids_of(tok, text)
        alone = parsing_segments(torch.tensor([single], dtype=torch.long).reshape(1, -1),
                                 torch.ones(1, len(single), dtype=torch.bool), tok, code_provider)
        assert seg.segment_ids[row][mask[row]].tolist() == alone.segment_ids[0].tolist()
        assert bool(seg.fallback[row]) == bool(alone.fallback[0])


def test_registry_rule_with_spacy_batch(tok):
    rule = build_termination("parsing", TerminationOptions(parser="spacy", parser_cutoff=5))
    ids, mask = _padded_batch(tok, [FOX, REVIEW_TEXT, "My cat sleeps on the warm red mat."], "left")
    seg = rule(SegmentationBatch(action_mask=mask, response_token_ids=ids, tokenizer=tok))
    validate_segment_ids(seg.segment_ids, mask)
    assert not seg.fallback.any()
    assert seg.segment_ids[0][mask[0]].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="needs response_token_ids and tokenizer"):
        rule(SegmentationBatch(action_mask=mask))
    with pytest.raises(ValueError, match="parser_cutoff"):
        build_termination("parsing", TerminationOptions(parser="code", parser_cutoff=0))


def test_code_provider_is_a_tree_provider():
    provider = CodeTreeProvider()
    assert provider.parse_many(["x = 1\n", "def (:"])[1] is None
    assert isinstance(provider.parse_many(["x = 1\n"])[0], Node)
