#!/usr/bin/env bash
# Step 2 DPO baseline (Appendix C.3): gemma-7b on webgpt. Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" dpo gemma-7b webgpt "$@"
