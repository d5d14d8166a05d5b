#!/usr/bin/env bash
# Table 2 (paper §4.2): test RM score of vanilla PPO and MA-PPO (fixed 5-gram) on TL;DR, HH-RLHF and WebGPT.
#   bash scripts/reproduce/table2.sh MODEL [TASK...]        MODEL: gemma-2b | gemma-7b | gemma2-27b
# Trains what is missing (SFT, RM, PPO, MA-PPO; Table 5 configs via scripts/step*/), samples one response per
# held-out prompt (2k for TL;DR / HH-RLHF, all of WebGPT; §4.1) with each final policy, scores it with the
# task's reward model (evaluation/rm_score.py) and prints this run beside the paper's Table 2.
# Responses and scores: outputs/reproduce/table2/MODEL/TASK/{ppo,mappo}.jsonl.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { sed -n '2,7p' "${BASH_SOURCE[0]}"; exit 2; }
MODEL=$1; shift
SIZE=$(paper_size "$MODEL")
TASKS=("$@")
[ ${#TASKS[@]} -gt 0 ] || TASKS=(tldr hh-rlhf webgpt)
RESULTS=()
for TASK in "${TASKS[@]}"; do
  ensure_run "$MODEL" "$TASK" ppo ppo
  ensure_run "$MODEL" "$TASK" mappo mappo
  OUT=outputs/reproduce/table2/$MODEL/$TASK
  score_policies "$MODEL" "$TASK" "$OUT" "$(eval_prompts "$TASK")" \
    ppo="$(run_dir "$MODEL" "$TASK" ppo)/actor" mappo="$(run_dir "$MODEL" "$TASK" mappo)/actor"
  RESULTS+=(--result "$TASK:ppo=$OUT/ppo.jsonl" --result "$TASK:mappo=$OUT/mappo.jsonl")
done
"$PY" -m evaluation.paper_numbers table2 --size "$SIZE" "${RESULTS[@]}"
