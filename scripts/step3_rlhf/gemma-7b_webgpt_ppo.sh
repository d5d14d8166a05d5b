#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): gemma-7b on webgpt. Extra flags override, see scripts/launch.sh.
RUN_NAME=${RUN_NAME:-ppo} exec bash "$(dirname "$0")/../launch.sh" ppo gemma-7b webgpt --termination fixed --ngram 1 "$@"
