#!/usr/bin/env bash
# Step 2 DPO baseline (Appendix C.3): gemma-2b on tldr. Env overrides and extra flags: see scripts/launch.sh.
exec bash "$(dirname "$0")/../launch.sh" dpo gemma-2b tldr "$@"
