#!/usr/bin/env bash
# Step 3 MA-PPO: gemma2-27b on hh-rlhf, fixed 5-gram by default; swap the rule with one flag, e.g.
#   bash scripts/step3_rlhf/gemma2-27b_hh-rlhf_mappo.sh --termination parsing     (or: --termination ppl, --termination randomized, --ngram 10)
RUN_NAME=${RUN_NAME:-mappo} exec bash "$(dirname "$0")/../launch.sh" ppo gemma2-27b hh-rlhf --termination fixed --ngram 5 "$@"
