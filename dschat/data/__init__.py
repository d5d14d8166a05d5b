"""Datasets for the three RLHF stages: adapters, the phase split, tokenised datasets and collators.

Flow: ``load_pairs`` / ``load_code_tasks`` (one adapter per dataset, rows in each hub's schema, from the
hub or a local file) -> ``pairs_for_phase`` (the paper's 20/40/40 SFT/RM/PPO split) -> ``SFTDataset`` /
``PairDataset`` / ``PromptDataset`` -> ``SFTCollator`` / ``PairCollator`` / ``PromptCollator``.
The offline default is the shipped ``synthetic`` task and its tokenizer (``load_synthetic_tokenizer``).
Exports are lazy (:mod:`dschat.core.lazy`): the dataset names and options load without torch.
"""
from dschat.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "collators": ("PairCollator", "PromptCollator", "SFTCollator", "pad_token_id_of"),
    "errors": ("DataError", "SkipCounter"),
    "loading": ("code_tasks_for_phase", "load_code_tasks", "load_pairs", "pairs_for_phase", "tasks_with_tests"),
    "options": ("DataOptions",),
    "phase_split": ("parse_data_split", "phase_indices", "phase_split"),
    "registry": ("known_datasets",),
    "schema": ("CodeTask", "PreferencePair"),
    "synthetic_task": ("SYNTHETIC_DATA_DIR", "SYNTHETIC_TOKENIZER_DIR", "load_synthetic_tokenizer",
                       "synthetic_gold_score"),
    "tokenized": ("IGNORE_INDEX", "PairDataset", "PromptDataset", "SFTDataset", "with_sequence_layout"),
})

# ``phase_split`` names both a submodule and its function: importing the submodule (which any of its names, or
# another submodule, may do first) binds the package attribute to the module, so bind the function now (the
# submodule needs numpy only).
from .phase_split import phase_split  # noqa: E402, F401
