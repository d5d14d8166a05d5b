#!/usr/bin/env bash
# Step 3 vanilla PPO (n = 1): codegemma-2b on apps. Extra flags override, see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" ppo codegemma-2b apps "$@"
