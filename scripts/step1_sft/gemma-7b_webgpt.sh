#!/usr/bin/env bash
# Step 1 SFT: gemma-7b on webgpt (Table 5). Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" sft gemma-7b webgpt "$@"
