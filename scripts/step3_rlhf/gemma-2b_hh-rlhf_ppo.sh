#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): gemma-2b on hh-rlhf. Extra flags override, see scripts/launch.sh.
RUN_NAME=${RUN_NAME:-ppo} exec bash "$(dirname "$0")/../launch.sh" ppo gemma-2b hh-rlhf --termination fixed --ngram 1 "$@"
