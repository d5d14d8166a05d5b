"""Model loading: HF causal LMs and tokenizers, the tiny embedded model, the reward model / critic.
Exports are lazy (:mod:`dschat.core.lazy`): the name checks of :mod:`.names` load without torch."""
from dschat.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "loading": ("ACTOR_SUBDIR", "ModelLoadError", "load_causal_lm", "load_tokenizer", "policy_model_dir",
                "resolve_model_path"),
    "reward_model": ("last_token_index", "load_reward_model", "position_ids", "sequence_scores",
                     "text_reward_function", "token_values"),
})
