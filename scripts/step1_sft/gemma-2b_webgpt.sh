#!/usr/bin/env bash
# Step 1 SFT: gemma-2b on webgpt (Table 5). Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" sft gemma-2b webgpt "$@"
