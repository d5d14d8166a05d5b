"""The names the macro-action maths accepts for its options (flags ``--sigma`` and ``--reward_agg``), in a module
without torch so that the command line can offer and check them cheaply."""

SIGMAS = ("equal", "unit", "position")
"""σ weights pooling token values into a macro value (paper §3.2.2, Appendix E)."""
REWARD_AGGS = ("sum", "mean")
"""How the token rewards of one macro action combine into its reward."""
ROLLOUT_IS_LEVELS = ("none", "token", "macro", "sequence")
"""Where the truncated importance weight of the rollout engine's samples is taken (``--rollout_is``)."""
