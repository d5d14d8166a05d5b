#!/usr/bin/env bash
# README's second command: create/refresh the environment, then run the test suite (CPU, ~10 min on 2 cores).
#   bash scripts/test.sh            # the default suite
#   bash scripts/test.sh -m integration   # opt-in: the LLM judge against a local server; any pytest args work
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# One intra-op thread: the test models are tiny, and several processes (two-rank runs, sandboxed programs)
# share two cores; oversubscribed OpenMP threads spin and slow everything down.
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}" TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$ROOT/.venv/bin/python" -m pytest "${@:--q}"
