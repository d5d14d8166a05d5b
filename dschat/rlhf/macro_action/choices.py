"""The names the macro-action maths accepts for its options (flags ``--sigma`` and ``--reward_agg``), in a module
without torch so that the command line can offer and check them cheaply."""

SIGMAS = ("equal", "unit", "position")
"""σ weights pooling token values into a macro value (paper §3.2.2, Appendix E)."""
REWARD_AGGS = ("sum", "mean")
"""How the token rewards of one macro action combine into its reward."""
ROLLOUT_IS_LEVELS = ("none", "token", "macro", "sequence")
"""Where the truncated importance weight of the rollout engine's samples is taken (``--rollout_is``)."""
RATIOS = ("token", "macro", "macro_geo", "sequence_geo")
"""The unit of the policy ratio and its clip (``--ratio``, :mod:`.objective`)."""
LOSS_AGGS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm", "macro_mean")
"""How the units' clipped terms become the loss (``--loss_agg``, :func:`.objective.aggregate`)."""
ROLLOUT_IS_MODES = ("truncate", "mask")
"""What the rollout correction does with a weight outside its bounds (``--rollout_is_mode``)."""
ROLLOUT_IS_AGGS = ("product", "geo")
"""How a macro's or a sequence's token ratios combine into its correction weight (``--rollout_is_agg``)."""
DEFAULT_LOSS_AGG = {"token": "token_mean", "macro": "macro_mean", "macro_geo": "macro_mean",
                    "sequence_geo": "seq_mean_token_mean"}
"""``--loss_agg`` when unset, per ``--ratio``: the mean over the ratio's own units (what the token and macro ratios
always did; GSPO's mean over sequences, Zheng et al. 2025 eq. 5)."""
