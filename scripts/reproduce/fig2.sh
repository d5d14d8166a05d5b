#!/usr/bin/env bash
# Fig. 2 (TL;DR), Fig. 13 (HH-RLHF), Fig. 15 (WebGPT): test RM score vs PPO step for vanilla PPO and MA-PPO with
# the parity speed-up (§4.2: "1.7-2x faster"), plus Fig. 11 (advantage / Q-value L2 norms) and Fig. 3 / 14 / 16
# (held-out RM score distributions of the final policies).
#   bash scripts/reproduce/fig2.sh MODEL [TASK]          MODEL: gemma-2b | gemma-7b | gemma2-27b; TASK: tldr (default)
# Trains what is missing (the test score is logged every eval_steps = 100 steps, Table 5 configs). EXTRA_SEEDS="2 3"
# trains more runs (RUN_NAME ppo-seed2, mappo-seed2, ...): the curves are then mean ± std across runs, as in Fig. 2.
# Outputs: outputs/reproduce/fig2/MODEL/TASK/{fig2,fig11,fig3}.png.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { sed -n '2,8p' "${BASH_SOURCE[0]}"; exit 2; }
MODEL=$1 TASK=${2:-tldr}
ensure_run "$MODEL" "$TASK" ppo ppo
ensure_run "$MODEL" "$TASK" mappo mappo
OUT=outputs/reproduce/fig2/$MODEL/$TASK
RUNS=(--run ppo="$(run_dir "$MODEL" "$TASK" ppo)" --run mappo="$(run_dir "$MODEL" "$TASK" mappo)")
for SEED in ${EXTRA_SEEDS:-}; do
  for KIND in ppo mappo; do
    ensure_run "$MODEL" "$TASK" "$KIND" "$KIND-seed$SEED" --seed "$SEED"
    RUNS+=(--run "$KIND=$(run_dir "$MODEL" "$TASK" "$KIND-seed$SEED")")
  done
done
"$PY" -m evaluation.curves "${RUNS[@]}" --baseline ppo --out "$OUT/fig2.png" --norms_out "$OUT/fig11.png" \
  --title "Test RM score, $MODEL on $TASK (cf. paper Fig. 2)"
score_policies "$MODEL" "$TASK" "$OUT/scores" "$(eval_prompts "$TASK")" \
  ppo="$(run_dir "$MODEL" "$TASK" ppo)/actor" mappo="$(run_dir "$MODEL" "$TASK" mappo)/actor"
"$PY" -m evaluation.plots distributions --scores ppo="$OUT/scores/ppo.jsonl" mappo="$OUT/scores/mappo.jsonl" \
  --title "RM score distribution at the final step, $MODEL on $TASK (cf. paper Fig. 3)" --out "$OUT/fig3.png"
