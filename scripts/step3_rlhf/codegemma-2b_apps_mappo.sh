#!/usr/bin/env bash
# Step 3 MA-PPO with the execution reward: codegemma-2b on APPS, fixed 10-gram by default (review discussion);
# swap the rule with one flag: --termination parsing --parser code, or --termination ppl.
RUN_NAME=${RUN_NAME:-mappo} exec bash "$(dirname "$0")/../launch.sh" ppo codegemma-2b apps --termination fixed --ngram 10 "$@"
