"""Policy tokens ↔ characters of the decoded response (paper Appendix B.4: the parsing tokenizer and the policy
tokenizer differ, so tree spans must be mapped onto policy tokens).

Each response token gets the piece of text it adds to the decoded response, by incremental detokenisation:
token ``i``'s piece is ``decode(ids[p:i+1])`` minus ``decode(ids[p:r])`` for a short window ``[p, r)`` of the
tokens before it. The window keeps context that decoders need (SentencePiece drops the leading space of the
first token it decodes), and a piece that ends in an incomplete UTF-8 character (byte-level BPE splitting a
multi-byte character) is held back until the token completing it, so that token carries the character and
the earlier ones carry ``""``. Pieces are verified: their concatenation must equal the decode of the whole
response, otherwise the response is reported unaligned (the parsing rule falls back to token-level macros).
About two decode calls of a few tokens each per token: linear in the response length. Offsets are plain
string offsets, so newlines cannot make them drift.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

Decode = Callable[[Sequence[int]], str]

_INCOMPLETE = "\ufffd"


def text_decoder(tokenizer) -> Decode:
    """``ids -> text`` without special tokens (EOS decodes to ``""``) and without clean-up of spaces (which
    would break the concatenation property). Uses the Rust backend of fast tokenizers directly (~10x less
    overhead per call than ``tokenizer.decode``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda ids: backend.decode(list(ids), skip_special_tokens=True)
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def token_pieces(token_ids: Sequence[int], decode: Decode) -> Optional[Tuple[str, List[str]]]:
    """``(text, pieces)`` with ``"".join(pieces) == text == decode(token_ids)`` and ``pieces[i]`` the text token
    ``i`` adds; ``None`` if the incremental pieces do not reproduce the full decode."""
    ids = list(token_ids)
    pieces: List[str] = []
    prefix_offset = read_offset = 0
    prefix_text = ""
    for index in range(len(ids)):
        new_text = decode(ids[prefix_offset:index + 1])
        if len(new_text) > len(prefix_text) and not new_text.endswith(_INCOMPLETE) \
                and new_text.startswith(prefix_text):
            pieces += [""] * (index - len(pieces)) + [new_text[len(prefix_text):]]
            prefix_offset, read_offset = read_offset, index + 1
            prefix_text = decode(ids[prefix_offset:read_offset])
    if read_offset < len(ids):  # tokens still held back (e.g. an invalid byte sequence): first one takes the rest
        rest = decode(ids[prefix_offset:])[len(prefix_text):]
        pieces += [rest] + [""] * (len(ids) - read_offset - 1)
    text = decode(ids)
    if "".join(pieces) != text:
        return None
    return text, pieces


def char_spans(pieces: Sequence[str]) -> List[Tuple[int, int]]:
    """``[start, end)`` character span of each piece in their concatenation."""
    spans, cursor = [], 0
    for piece in pieces:
        spans.append((cursor, cursor + len(piece)))
        cursor += len(piece)
    return spans


def anchors(pieces: Sequence[str]) -> List[int]:
    """Each token's *anchor*: the offset of its first non-whitespace character, -1 for a token with none
    (whitespace, a held-back partial character, a special token). A token belongs to the tree node that
    contains its anchor."""
    out, cursor = [], 0
    for piece in pieces:
        stripped = piece.lstrip()
        out.append(cursor + len(piece) - len(stripped) if stripped else -1)
        cursor += len(piece)
    return out
