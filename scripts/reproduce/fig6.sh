#!/usr/bin/env bash
# Fig. 6 (paper §4.3.2): MA-PPO with fixed n-gram macro actions, n in {3, 5, 10, inf}, against vanilla PPO (n = 1)
# on TL;DR and HH-RLHF: test RM score vs step per n, and the held-out RM score of each final policy.
#   bash scripts/reproduce/fig6.sh MODEL [TASK...]       MODEL: gemma-2b (the paper's) | gemma-7b
# Outputs: outputs/reproduce/fig6/MODEL/TASK/{fig6.png, scores/n*.jsonl}.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { sed -n '2,5p' "${BASH_SOURCE[0]}"; exit 2; }
MODEL=$1; shift
TASKS=("$@")
[ ${#TASKS[@]} -gt 0 ] || TASKS=(tldr hh-rlhf)
for TASK in "${TASKS[@]}"; do
  OUT=outputs/reproduce/fig6/$MODEL/$TASK
  ensure_run "$MODEL" "$TASK" ppo ppo
  RUNS=(--run "n1=$(run_dir "$MODEL" "$TASK" ppo)")
  POLICIES=("n1=$(run_dir "$MODEL" "$TASK" ppo)/actor")
  for N in 3 5 10 inf; do
    RUN=mappo-n$N
    [ "$N" = 5 ] && RUN=mappo
    ensure_run "$MODEL" "$TASK" mappo "$RUN" --ngram "$N"
    RUNS+=(--run "n$N=$(run_dir "$MODEL" "$TASK" "$RUN")")
    POLICIES+=("n$N=$(run_dir "$MODEL" "$TASK" "$RUN")/actor")
  done
  "$PY" -m evaluation.curves "${RUNS[@]}" --baseline n1 --out "$OUT/fig6.png" \
    --title "MA-PPO with n-gram macro actions, $MODEL on $TASK (cf. paper Fig. 6)"
  score_policies "$MODEL" "$TASK" "$OUT/scores" "$(eval_prompts "$TASK")" "${POLICIES[@]}"
done
echo "paper (Fig. 6): every n > 1 beats n = 1; n = inf is best on TL;DR, n = 10 on HH-RLHF"
