#!/usr/bin/env bash
# The PPO vs MA-PPO study (issue 16): paired runs over seeds on the short (synthetic) and long (synthetic-long)
# embedded tasks, two at a time on two cores, resumable (finished runs are skipped), then the report
# (Markdown + PNG, with the compact per-run summaries it is computed from) in docs/study/.
#   bash scripts/reproduce/study.sh
# Environment: OUT (default outputs/study), REPORT (default docs/study), SEEDS (main comparison, default 8),
# ABLATION_SEEDS (default 5), JOBS (default 2), MODEL (SFT base model, default tiny-gemma; e.g.
# smollm2-135m-instruct on a GPU), BUDGET_MINUTES (start no new run after this; rerun to go on).
# Time: ~1 CPU minute per long-task run and ~35 CPU seconds per short-task run; docs/study/README.md has the
# measured wall time of the whole study on 2 shared cores.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
OUT="${OUT:-outputs/study}"
REPORT="${REPORT:-docs/study}"
BUDGET=()
[ -n "${BUDGET_MINUTES:-}" ] && BUDGET=(--budget_minutes "$BUDGET_MINUTES")
"$PY" -m evaluation.study run --out "$OUT" --seeds "${SEEDS:-8}" --ablation_seeds "${ABLATION_SEEDS:-5}" \
  --jobs "${JOBS:-2}" --model "${MODEL:-tiny-gemma}" "${BUDGET[@]}"
"$PY" -m evaluation.study_positions --out "$OUT" --report_dir "$REPORT"
"$PY" -m evaluation.study report --out "$OUT" --report_dir "$REPORT"
