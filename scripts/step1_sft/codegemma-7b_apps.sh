#!/usr/bin/env bash
# Step 1 SFT: codegemma-7b on APPS (Table 5). Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" sft codegemma-7b apps "$@"
