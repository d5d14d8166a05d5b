"""Datasets for the three RLHF stages: adapters, the phase split, tokenised datasets and collators.

Flow: ``load_pairs`` / ``load_code_tasks`` (one adapter per dataset, rows in each hub's schema, from the
hub or a local file) -> ``pairs_for_phase`` (the paper's 20/40/40 SFT/RM/PPO split) -> ``SFTDataset`` /
``PairDataset`` / ``PromptDataset`` -> ``SFTCollator`` / ``PairCollator`` / ``PromptCollator``.
The offline default is the shipped ``synthetic`` task and its tokenizer (``load_synthetic_tokenizer``).
"""
from .collators import PairCollator, PromptCollator, SFTCollator, pad_token_id_of
from .errors import DataError, SkipCounter
from .loading import code_tasks_for_phase, load_code_tasks, load_pairs, pairs_for_phase, tasks_with_tests
from .options import DataOptions
from .phase_split import parse_data_split, phase_indices, phase_split
from .registry import known_datasets
from .schema import CodeTask, PreferencePair
from .synthetic_task import (SYNTHETIC_DATA_DIR, SYNTHETIC_TOKENIZER_DIR, load_synthetic_tokenizer,
                             synthetic_gold_score)
from .tokenized import IGNORE_INDEX, PairDataset, PromptDataset, SFTDataset, with_sequence_layout

__all__ = [
    "CodeTask", "DataError", "DataOptions", "IGNORE_INDEX", "PairCollator", "PairDataset", "PreferencePair", "PromptCollator",
    "PromptDataset", "SFTCollator", "SFTDataset", "SYNTHETIC_DATA_DIR", "SYNTHETIC_TOKENIZER_DIR", "SkipCounter",
    "code_tasks_for_phase", "known_datasets", "load_code_tasks", "load_pairs", "load_synthetic_tokenizer",
    "pad_token_id_of", "pairs_for_phase", "parse_data_split", "phase_indices", "phase_split",
    "synthetic_gold_score", "tasks_with_tests", "with_sequence_layout",
]
