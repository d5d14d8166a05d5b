#!/usr/bin/env bash
# Step 1 SFT: gemma2-27b on webgpt (Table 5). Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" sft gemma2-27b webgpt "$@"
