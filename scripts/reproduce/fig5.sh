#!/usr/bin/env bash
# Fig. 5 (paper §4.3.1) and Table 9: MA-PPO with each termination rule (fixed 5-gram, randomized n-gram, parsing,
# perplexity) against vanilla PPO on TL;DR. Left: test RM score vs step; right: LLM-judge win rate of each rule
# against PPO (Appendix F.1 TL;DR prompt, one verdict over relevance / coherence / consistency / fluency).
#   bash scripts/reproduce/fig5.sh MODEL [TASK]         MODEL: gemma-2b (the paper's) | gemma-7b; TASK: tldr
# Judge settings as in fig4.sh (JUDGE_MODEL, JUDGE_BASE_URL, JUDGE_FLAGS).
# Outputs: outputs/reproduce/fig5/MODEL/TASK/{fig5_left.png, fig5_right.png, scores/, RULE/judge.json}.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { sed -n '2,7p' "${BASH_SOURCE[0]}"; exit 2; }
MODEL=$1 TASK=${2:-tldr}
OUT=outputs/reproduce/fig5/$MODEL/$TASK
JUDGE=(--model "${JUDGE_MODEL:-gpt-4o}" --cache "$OUT/judge_cache.jsonl" --no_progress_bar ${JUDGE_FLAGS:-})
[ -n "${JUDGE_BASE_URL:-}" ] && JUDGE+=(--base_url "$JUDGE_BASE_URL")
ensure_run "$MODEL" "$TASK" ppo ppo
ensure_run "$MODEL" "$TASK" mappo mappo
ensure_run "$MODEL" "$TASK" mappo mappo-randomized --termination randomized
ensure_run "$MODEL" "$TASK" mappo mappo-parsing --termination parsing
ensure_run "$MODEL" "$TASK" mappo mappo-ppl --termination ppl
RULES=(mappo mappo-randomized mappo-parsing mappo-ppl)
RUNS=(--run ppo="$(run_dir "$MODEL" "$TASK" ppo)")
POLICIES=(ppo="$(run_dir "$MODEL" "$TASK" ppo)/actor")
for RULE in "${RULES[@]}"; do
  RUNS+=(--run "$RULE=$(run_dir "$MODEL" "$TASK" "$RULE")")
  POLICIES+=("$RULE=$(run_dir "$MODEL" "$TASK" "$RULE")/actor")
done
"$PY" -m evaluation.curves "${RUNS[@]}" --baseline ppo --out "$OUT/fig5_left.png" \
  --title "Termination rules, $MODEL on $TASK (cf. paper Fig. 5 left)"
score_policies "$MODEL" "$TASK" "$OUT/scores" 50 "${POLICIES[@]}"
SUMMARIES=()
for RULE in "${RULES[@]}"; do
  "$PY" -m evaluation.judge --task "$TASK" --a "$OUT/scores/$RULE.jsonl" --b "$OUT/scores/ppo.jsonl" \
    --name_a "$RULE" --name_b ppo --summary "$OUT/$RULE/judge.json" --output "$OUT/$RULE/verdicts.jsonl" "${JUDGE[@]}"
  SUMMARIES+=("$OUT/$RULE/judge.json")
done
"$PY" -m evaluation.plots winrates --summary "${SUMMARIES[@]}" --out "$OUT/fig5_right.png"
echo "paper (Table 9, TL;DR, Gemma-2B): RM score / GPT-4 win rate vs PPO: fixed 5-gram 1.40 / 78%," \
  "parsing 1.37 / 78%, PPL 1.27 / 72%"
