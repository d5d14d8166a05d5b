#!/usr/bin/env bash
# Step 3 MA-PPO: gemma2-27b on tldr, fixed 5-gram by default; swap the rule with one flag, e.g.
#   bash scripts/step3_rlhf/gemma2-27b_tldr_mappo.sh --termination parsing     (or: --termination ppl, --termination randomized, --ngram 10)
RUN_NAME=${RUN_NAME:-mappo} exec bash "$(dirname "$0")/../launch.sh" ppo gemma2-27b tldr --termination fixed --ngram 5 "$@"
