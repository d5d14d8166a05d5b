"""Macro actions for PPO (MA-RLHF, Chai et al., ICLR 2025): pure torch functions, no trainer state.

Pipeline: a termination rule (``build_termination``) gives segment ids → :func:`compute_macro_advantages`
(σ-pooled macro values, summed macro rewards, macro GAE, broadcast to tokens) → :func:`policy_loss` (token or
macro ratio) and :func:`value_loss`. With ``ngram = 1`` everything reduces exactly to token-level PPO.
Exports are lazy (:mod:`dschat.core.lazy`): the option names (:mod:`.choices`) load without torch.
"""
from dschat.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "choices": ("DEFAULT_LOSS_AGG", "LOSS_AGGS", "RATIOS", "REWARD_AGGS", "ROLLOUT_IS_AGGS", "ROLLOUT_IS_LEVELS",
                "ROLLOUT_IS_MODES", "SIGMAS"),
    "advantages": ("compute_macro_advantages", "macro_statistics"),
    "gae": ("macro_gae", "masked_whiten"),
    "correction": ("bounded_weights", "correction_statistics", "importance_weights", "logprob_gap"),
    "losses": ("RATIO_MODES", "masked_mean", "policy_loss", "value_loss"),
    "objective": ("aggregate", "clipped_objective", "unit_log_ratio", "unit_segments", "whole_response_segments"),
    "segments": ("macro_lengths", "macro_rewards", "macro_values", "macros_per_row", "response_ranks",
                 "segment_mean", "segment_sum", "segments_from_lengths", "sigma_weights", "to_tokens",
                 "validate_segment_ids"),
    "termination": ("Segmentation", "SegmentationBatch", "TerminationOptions", "TerminationRule",
                    "available_terminations", "build_termination", "ngram_segments", "ppl_segments",
                    "randomized_ngram_segments", "register_termination", "shuffled_length_table"),
})
