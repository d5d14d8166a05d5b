#!/usr/bin/env bash
# The PPO vs MA-PPO study (issue 16): paired runs over seeds on the short (synthetic) and long (synthetic-long)
# embedded tasks, two at a time on two cores, resumable (finished runs are skipped), then the report
# (Markdown + PNG, with the compact per-run summary it is computed from) in docs/study/.
#   bash scripts/reproduce/study.sh
# Environment: OUT (default outputs/study), REPORT (default docs/study), SEEDS (main comparison, default 8),
# ABLATION_SEEDS (default 3), JOBS (default 2), MODEL (SFT base model, default tiny-gemma; e.g.
# smollm2-135m-instruct on a GPU), BUDGET_MINUTES (start no new run after this; rerun to go on).
# Time: measured on 2 shared CPU cores (see docs/study/README.md): ~2 min per short run and ~4 min per long run.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"
OUT="${OUT:-outputs/study}"
BUDGET=()
[ -n "${BUDGET_MINUTES:-}" ] && BUDGET=(--budget_minutes "$BUDGET_MINUTES")
"$PY" -m evaluation.study run --out "$OUT" --seeds "${SEEDS:-8}" --ablation_seeds "${ABLATION_SEEDS:-3}" \
  --jobs "${JOBS:-2}" --model "${MODEL:-tiny-gemma}" "${BUDGET[@]}"
"$PY" -m evaluation.study report --out "$OUT" --report_dir "${REPORT:-docs/study}"
