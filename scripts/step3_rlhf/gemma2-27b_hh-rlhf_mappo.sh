#!/usr/bin/env bash
# Step 3 MA-PPO: gemma2-27b on hh-rlhf with its config's fixed n-gram (configs/ppo/); swap the rule with one flag, e.g.
#   bash scripts/step3_rlhf/gemma2-27b_hh-rlhf_mappo.sh --termination parsing     (or: --termination ppl, --termination randomized, --ngram 10)
exec bash "$(dirname "$0")/../launch.sh" mappo gemma2-27b hh-rlhf "$@"
