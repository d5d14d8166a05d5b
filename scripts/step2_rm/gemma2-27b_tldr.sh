#!/usr/bin/env bash
# Step 2 reward model: gemma2-27b on tldr (Table 5). Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" rm gemma2-27b tldr "$@"
