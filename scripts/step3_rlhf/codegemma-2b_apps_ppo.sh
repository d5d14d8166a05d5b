#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1) with the execution reward: codegemma-2b on APPS.
RUN_NAME=${RUN_NAME:-ppo} exec bash "$(dirname "$0")/../launch.sh" ppo codegemma-2b apps --termination fixed --ngram 1 "$@"
