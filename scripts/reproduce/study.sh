#!/usr/bin/env bash
# The PPO vs MA-PPO study: paired runs over seeds on the short (synthetic) and long (synthetic-long) embedded
# tasks, two at a time on two cores, resumable (finished runs are skipped), each run under a time limit, then the
# report (Markdown + PNG, with the compact per-run summaries it is computed from) in docs/study/.
#   bash scripts/reproduce/study.sh            # train what is missing at this commit, then the report
#   bash scripts/reproduce/study.sh --verify   # retrain three runs from scratch (SFT, RM, PPO to their first
#                                              # evaluation) and require the committed evaluations, exactly
# Environment: OUT (default outputs/study; --verify: outputs/study-verify), REPORT (default docs/study), SEEDS
# (core arms and sweeps, default 8), ABLATION_SEEDS (default 4), JOBS (default 2), MODEL (SFT base model, default
# tiny-gemma; e.g. smollm2-135m-instruct on a GPU), BUDGET_MINUTES (start no new run after this; rerun to go on),
# VERIFY_RUN (default: evaluation/study/design.py's VERIFY_RUNS, one run of the exploration, one of the confirmation and one on a
# further SFT + RM seed).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
REPORT="${REPORT:-docs/study}"
if [ "${1:-}" = "--verify" ]; then
  RUNS=()
  [ -n "${VERIFY_RUN:-}" ] && read -ra RUNS <<< "--verify_run $VERIFY_RUN"
  exec "$PY" -m evaluation.study verify --out "${OUT:-outputs/study-verify}" --report_dir "$REPORT" \
    "${RUNS[@]}" --model "${MODEL:-tiny-gemma}"
fi
OUT="${OUT:-outputs/study}"
BUDGET=()
[ -n "${BUDGET_MINUTES:-}" ] && BUDGET=(--budget_minutes "$BUDGET_MINUTES")
"$PY" -m evaluation.study run --out "$OUT" --seeds "${SEEDS:-8}" --ablation_seeds "${ABLATION_SEEDS:-4}" \
  --jobs "${JOBS:-2}" --model "${MODEL:-tiny-gemma}" "${BUDGET[@]}"
"$PY" -m evaluation.study_positions --out "$OUT" --report_dir "$REPORT"
"$PY" -m evaluation.study report --out "$OUT" --report_dir "$REPORT"
