#!/usr/bin/env bash
# Step 3 MA-PPO: gemma-2b on tldr, fixed 5-gram by default; swap the rule with one flag, e.g.
#   bash scripts/step3_rlhf/gemma-2b_tldr_mappo.sh --termination parsing     (or: --termination ppl, --termination randomized, --ngram 10)
RUN_NAME=${RUN_NAME:-mappo} exec bash "$(dirname "$0")/../launch.sh" ppo gemma-2b tldr --termination fixed --ngram 5 "$@"
