# Sourced by every script of scripts/reproduce/ (not run): strict mode, the repository root as working
# directory, the project's Python in PY (the environment is created when missing), and `have DIR` (a final HF
# model exists in DIR).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ -x "$ROOT/.venv/bin/python" ] || bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
export TOKENIZERS_PARALLELISM=false

have() { [ -f "$1/config.json" ]; }
