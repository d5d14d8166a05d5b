"""What a model flag may name, checked when the flags are parsed (no torch, no transformers, no network): a local
HF checkpoint directory, a hub id ``org/name``, or an offline name. A local path that does not exist is one line
naming it — never a hub lookup with retries."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Dict, Iterator, Optional

from dschat.core.config import ConfigError

from .smollm2 import SMOLLM2

TINY_GEMMA = "tiny-gemma"
ASSET_TOKENIZER = Path(__file__).resolve().parents[1] / "assets" / "tokenizer"
"""The tokenizer shipped with the package (tiny-gemma's)."""


def tiny_gemma_dims(vocab_size: int, hidden_size: int = 128, num_layers: int = 4) -> dict:
    """The dimensions of tiny-gemma's Gemma config (``dschat/model/tiny.py``; the memory plan counts them
    without torch)."""
    return dict(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=4 * hidden_size,
                num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=1, head_dim=hidden_size // 4,
                max_position_embeddings=1024, tie_word_embeddings=True)
OFFLINE_NAMES = (TINY_GEMMA, SMOLLM2)
_deferred: Optional[Dict[str, str]] = None


@contextlib.contextmanager
def deferred_checks() -> Iterator[Dict[str, str]]:
    """Within it, :func:`check_model_name` lets a bad name through and records ``{name: problem}`` in the
    yielded dict instead of raising: the pre-flight (``--dry_run``) lists it with every other missing thing."""
    global _deferred
    _deferred = {}
    try:
        yield _deferred
    finally:
        _deferred = None


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` (one slash, no leading ``.``, ``/`` or ``~``) whose ``org`` is not a local directory: only then
    is a name that is not a local directory tried on the hub (``outputs/sfft`` is a missing local directory)."""
    parts = name.split("/")
    return (len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))
            and not os.path.isdir(parts[0]))


def check_model_name(name: str) -> str:
    """``name`` if it is an offline name, a local HF checkpoint directory or shaped like a hub id; otherwise a
    :class:`ConfigError` saying what is missing (recorded instead within :func:`deferred_checks`)."""
    try:
        return _check_model_name(name)
    except ConfigError as err:
        if _deferred is None:
            raise
        _deferred[name] = str(err)
        return name


def _check_model_name(name: str) -> str:
    if name in OFFLINE_NAMES or looks_like_hub_id(name):
        return name
    if os.path.isdir(name):
        if not (Path(name) / "config.json").exists():
            raise ConfigError(f"{name}: no config.json there (expected a HF-format checkpoint directory)")
        return name
    if os.path.exists(name):
        raise ConfigError(f"{name} is a file (expected a HF checkpoint directory)")
    raise ConfigError(f"no such directory {name} (expected a HF checkpoint directory, a hub id org/name, or one "
                      f"of: {', '.join(OFFLINE_NAMES)})")
