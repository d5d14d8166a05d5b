#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): gemma-2b on hh-rlhf. Extra flags override, see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" ppo gemma-2b hh-rlhf "$@"
