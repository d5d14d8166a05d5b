#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): gemma-2b on webgpt. Extra flags override, see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" ppo gemma-2b webgpt "$@"
