#!/usr/bin/env bash
# README's second command: create/refresh the environment, then run the test suite (CPU).
#   bash scripts/test.sh            # the default suite
#   bash scripts/test.sh -m integration   # opt-in: the LLM judge against a local server; any pytest args work
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# One intra-op thread (scripts/threads.sh): the test models are tiny, and several processes (two-rank runs,
# sandboxed programs) share the cores; oversubscribed OpenMP threads spin and slow everything down.
source "$ROOT/scripts/threads.sh"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}" TOKENIZERS_PARALLELISM=false
exec "$ROOT/.venv/bin/python" -m pytest "${@:--q}"
