#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): codegemma-7b on apps. Extra flags override, see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" ppo codegemma-7b apps "$@"
