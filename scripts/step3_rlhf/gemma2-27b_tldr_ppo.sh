#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): gemma2-27b on tldr. Extra flags override, see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" ppo gemma2-27b tldr "$@"
