#!/usr/bin/env bash
# README's second command: create/refresh the environment, then run the test suite (CPU, ~10 min on 2 cores).
#   bash scripts/test.sh            # the default suite
#   bash scripts/test.sh -m slow    # opt-in slow tests (full HumanEval, multi-stage runs); any pytest args work
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}" TOKENIZERS_PARALLELISM=false
exec "$ROOT/.venv/bin/python" -m pytest "${@:--q}"
