"""Macro actions for PPO (MA-RLHF, Chai et al., ICLR 2025): pure torch functions, no trainer state.

Pipeline: a termination rule (``build_termination``) gives segment ids → :func:`compute_macro_advantages`
(σ-pooled macro values, summed macro rewards, macro GAE, broadcast to tokens) → :func:`policy_loss` (token or
macro ratio) and :func:`value_loss`. With ``ngram = 1`` everything reduces exactly to token-level PPO.
"""
from .advantages import compute_macro_advantages, macro_statistics
from .gae import macro_gae, masked_whiten
from .losses import RATIO_MODES, masked_mean, policy_loss, value_loss
from .segments import (REWARD_AGGS, SIGMAS, macro_lengths, macro_rewards, macro_values, macros_per_row,
                       response_ranks, segment_mean, segment_sum, segments_from_lengths, sigma_weights, to_tokens,
                       validate_segment_ids)
from .termination import (Segmentation, SegmentationBatch, TerminationOptions, TerminationRule,
                          available_terminations, build_termination, ngram_segments, ppl_segments,
                          randomized_ngram_segments, register_termination, shuffled_length_table)

__all__ = [
    "REWARD_AGGS", "RATIO_MODES", "SIGMAS",
    "Segmentation", "SegmentationBatch", "TerminationOptions", "TerminationRule",
    "available_terminations", "build_termination", "register_termination",
    "ngram_segments", "randomized_ngram_segments", "shuffled_length_table", "ppl_segments",
    "segments_from_lengths", "validate_segment_ids", "response_ranks", "macros_per_row",
    "segment_sum", "segment_mean", "macro_lengths", "sigma_weights", "macro_values", "macro_rewards", "to_tokens",
    "macro_gae", "masked_whiten", "masked_mean", "policy_loss", "value_loss",
    "compute_macro_advantages", "macro_statistics",
]
