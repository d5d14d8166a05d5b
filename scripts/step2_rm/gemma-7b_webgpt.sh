#!/usr/bin/env bash
# Step 2 reward model: gemma-7b on webgpt (Table 5). Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" rm gemma-7b webgpt "$@"
