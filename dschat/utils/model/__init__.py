"""Model loading: HF causal LMs and tokenizers, the tiny embedded model, the reward model / critic."""
from .loading import ACTOR_SUBDIR, ModelLoadError, load_causal_lm, load_tokenizer, policy_model_dir, resolve_model_path
from .reward_model import (last_token_index, load_reward_model, position_ids, sequence_scores, text_reward_function,
                           token_values)

__all__ = [
    "ACTOR_SUBDIR",
    "ModelLoadError",
    "load_causal_lm",
    "load_reward_model",
    "load_tokenizer",
    "last_token_index",
    "policy_model_dir",
    "position_ids",
    "resolve_model_path",
    "sequence_scores",
    "text_reward_function",
    "token_values",
]
