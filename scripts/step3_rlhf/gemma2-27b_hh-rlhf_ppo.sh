#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): gemma2-27b on hh-rlhf. Extra flags override, see scripts/launch.sh.
RUN_NAME=${RUN_NAME:-ppo} exec bash "$(dirname "$0")/../launch.sh" ppo gemma2-27b hh-rlhf --termination fixed --ngram 1 "$@"
