#!/usr/bin/env bash
# Fig. 4 (paper §4.2): LLM-judge win rates of MA-PPO against vanilla PPO on TL;DR, HH-RLHF and WebGPT with the
# Appendix F.1 prompts (response order randomised), and Table 1's agreement between the RM, the judge and human
# labels where a labels file exists.
#   bash scripts/reproduce/fig4.sh MODEL [TASK...]      MODEL: gemma-2b | gemma-7b | gemma2-27b
# Judge: JUDGE_MODEL (default gpt-4o, the paper's), JUDGE_BASE_URL (any OpenAI-compatible server; default OpenAI,
# which needs OPENAI_API_KEY), JUDGE_FLAGS (extra evaluation.judge flags, e.g. "--constrain logit_bias
# --judge_tokenizer DIR" for a small local judge under `transformers serve DIR`, see README), HUMAN_LABELS_DIR (optional; TASK.csv there with prompt,preferred = a (MA-PPO) / b (PPO) / tie).
# Each task uses the first 50 held-out prompts (§4.1: 50 instances); completions are cached in the output dir.
# Outputs: outputs/reproduce/fig4/MODEL/{TASK/*.jsonl, TASK/judge.json, fig4.png}.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { sed -n '2,11p' "${BASH_SOURCE[0]}"; exit 2; }
MODEL=$1; shift
SIZE=$(paper_size "$MODEL")
TASKS=("$@")
[ ${#TASKS[@]} -gt 0 ] || TASKS=(tldr hh-rlhf webgpt)
OUT=outputs/reproduce/fig4/$MODEL
JUDGE=(--model "${JUDGE_MODEL:-gpt-4o}" --cache "$OUT/judge_cache.jsonl" --no_progress_bar ${JUDGE_FLAGS:-})
[ -n "${JUDGE_BASE_URL:-}" ] && JUDGE+=(--base_url "$JUDGE_BASE_URL")
SUMMARIES=()
for TASK in "${TASKS[@]}"; do
  ensure_run "$MODEL" "$TASK" ppo ppo
  ensure_run "$MODEL" "$TASK" mappo mappo
  score_policies "$MODEL" "$TASK" "$OUT/$TASK" 50 \
    MA-PPO="$(run_dir "$MODEL" "$TASK" mappo)/actor" PPO="$(run_dir "$MODEL" "$TASK" ppo)/actor"
  "$PY" -m evaluation.judge --task "$TASK" --a "$OUT/$TASK/MA-PPO.jsonl" --b "$OUT/$TASK/PPO.jsonl" \
    --name_a MA-PPO --name_b PPO --output "$OUT/$TASK/verdicts.jsonl" --summary "$OUT/$TASK/judge.json" "${JUDGE[@]}"
  SUMMARIES+=("$OUT/$TASK/judge.json")
  AGREEMENT=(--rm_a "$OUT/$TASK/MA-PPO.jsonl" --rm_b "$OUT/$TASK/PPO.jsonl" --judge "$OUT/$TASK/verdicts.jsonl")
  HUMAN="${HUMAN_LABELS_DIR:-/nonexistent}/$TASK.csv"
  [ -f "$HUMAN" ] && AGREEMENT+=(--human "$HUMAN")
  [ "$TASK" = tldr ] && [ "$SIZE" != 27b ] && AGREEMENT+=(--size "$SIZE")
  echo "== $TASK: agreement (Table 1) =="
  "$PY" -m evaluation.agreement "${AGREEMENT[@]}"
done
"$PY" -m evaluation.plots winrates --summary "${SUMMARIES[@]}" --out "$OUT/fig4.png"
echo "paper (Fig. 4, GPT-4 / human win rates of MA-PPO vs PPO): TL;DR 2B 78% / 74%, 7B 86% / 69%;" \
  "HH-RLHF 2B 58% / 52%, 7B 72% / 56%; WebGPT 7B 64% (GPT-4)"
