#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): gemma-7b on tldr. Extra flags override, see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" ppo gemma-7b tldr "$@"
