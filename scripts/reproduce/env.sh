# Sourced by every script of scripts/reproduce/ (not run): strict mode, the repository root as working
# directory, the project's Python in PY (the environment is created when missing), and `have DIR` (a final HF
# model exists in DIR), `timed NAME CMD...` (wall and CPU seconds of a stage); threads from scripts/threads.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$ROOT/scripts/threads.sh"
[ -x "$ROOT/.venv/bin/python" ] || bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
export TOKENIZERS_PARALLELISM=false

have() { [ -f "$1/config.json" ]; }

# timed NAME CMD...: run CMD, append "NAME wall_s=W cpu_s=C" (CPU = user + sys of the processes CMD ran, from bash's
# `times`, called in this shell: a $(...) subshell would count its own children only) to $OUT/times.txt (read by
# evaluation.pipeline_record)
timed() {
  local name=$1 start
  shift
  start=$(date +%s.%N)
  times > "$OUT/.cpu_before"
  "$@"
  times > "$OUT/.cpu_after"
  "$PY" - "$name" "$start" "$(date +%s.%N)" "$OUT/.cpu_before" "$OUT/.cpu_after" >> "$OUT/times.txt" <<'EOF'
import re, sys
def children_cpu(path):  # bash `times`, second line: the children's "user sys", e.g. "1m2.345s 0m0.567s"
    line = open(path).read().splitlines()[1]
    return sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", line))
name, start, end, before, after = sys.argv[1:]
print(f"{name} wall_s={float(end) - float(start):.0f} cpu_s={children_cpu(after) - children_cpu(before):.0f}")
EOF
  tail -1 "$OUT/times.txt" >&2
}
