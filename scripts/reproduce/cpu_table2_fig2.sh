#!/usr/bin/env bash
# Table 2 and Fig. 2 (paper §4.2) on the embedded default, CPU-sized: trains vanilla PPO (n = 1) and MA-PPO
# (fixed 5-gram) from the same SFT model and reward model with the flags of scripts/demo.sh, then
#   - prints a Table-2-style table: this run's held-out RM score beside the paper's (TL;DR, Gemma-2B), and the
#     length-debiased RM scores (review discussion),
#   - writes fig2.png (test RM score vs PPO step, with the parity speed-up), fig11.png (advantage / Q-value
#     L2 norms) and fig3.png (distribution of held-out RM scores) into $OUT.
#   bash scripts/reproduce/cpu_table2_fig2.sh
# Environment: DEMO_DIR (default outputs/demo: its sft/ and rm/ are reused when present, else trained into $OUT
# with the demo's flags), OUT (default outputs/reproduce/cpu_table2_fig2), SEEDS (default "1234"; several, e.g.
# "1 2 3", train one PPO and one MA-PPO run per seed: Fig. 2 then shows mean ± std across runs).
# Work: the same two step-3 runs as scripts/demo.sh (their times are in docs/demo/record.json) plus scoring 400
# prompts per policy.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"
DEMO="${DEMO_DIR:-outputs/demo}"
OUT="${OUT:-outputs/reproduce/cpu_table2_fig2}"
SEEDS=(${SEEDS:-1234})

# --- SFT and reward model: scripts/demo.sh's, or the same commands ---
source "$ROOT/scripts/demo_flags.sh"
SFT="$DEMO/sft" RM="$DEMO/rm"
if ! have "$SFT"; then
  SFT="$OUT/sft"
  echo "== SFT (as scripts/demo.sh) -> $SFT =="
  "$PY" training/step1_supervised_finetuning/main.py "${DEMO_SFT_FLAGS[@]}" --output_dir "$SFT" --seed 1234
fi
if ! have "$RM"; then
  RM="$OUT/rm"
  echo "== reward model (as scripts/demo.sh) -> $RM =="
  "$PY" training/step2_reward_model_finetuning/main.py --model_name_or_path "$SFT" "${DEMO_RM_FLAGS[@]}" \
    --output_dir "$RM" --seed 1234
fi
echo "SFT model: $SFT   reward model: $RM"

# --- PPO and MA-PPO: the flags of scripts/demo.sh; a fresh directory per run so metrics.jsonl holds one run ---
demo_ppo_flags "$SFT" "$RM"
CURVES=() TABLE=() SCORES=()
for SEED in "${SEEDS[@]}"; do
  for METHOD in ppo mappo; do
    NGRAM=1; [ "$METHOD" = mappo ] && NGRAM=5
    RUN="$OUT/$METHOD/seed$SEED"
    echo "== $METHOD (fixed $NGRAM-gram), seed $SEED -> $RUN =="
    rm -rf "$RUN"
    "$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" --seed "$SEED" --termination fixed --ngram "$NGRAM" \
      --output_dir "$RUN"
    CURVES+=(--run "$METHOD=$RUN")
  done
done

# --- held-out RM score of the final policies (one sample per validation prompt, T = 0.8, as step 3 evaluates) ---
SEED0=${SEEDS[0]}
for SEED in "${SEEDS[@]}"; do
  "$PY" -m evaluation.rm_score --reward_model "$RM" --data_name synthetic --temperature 0.8 --max_new_tokens 24 \
    --max_prompt_len 32 --batch_size 64 --seed "$SEED" --output_dir "$OUT/scores/seed$SEED" \
    --policy ppo="$OUT/ppo/seed$SEED/actor" --policy mappo="$OUT/mappo/seed$SEED/actor"
  TABLE+=(--result "synthetic:ppo=$OUT/scores/seed$SEED/ppo.jsonl" --result "synthetic:mappo=$OUT/scores/seed$SEED/mappo.jsonl")
done

echo
"$PY" -m evaluation.paper_numbers table2 --size 2b --paper_task tldr "${TABLE[@]}"
echo
"$PY" -m evaluation.length_debias --scores ppo="$OUT/scores/seed$SEED0/ppo.jsonl" \
  mappo="$OUT/scores/seed$SEED0/mappo.jsonl" --paper tldr:2b
echo
"$PY" -m evaluation.curves "${CURVES[@]}" --baseline ppo --out "$OUT/fig2.png" --norms_out "$OUT/fig11.png" \
  --title "Test RM score vs PPO step, synthetic task, tiny Gemma (cf. paper Fig. 2)"
"$PY" -m evaluation.plots distributions --scores ppo="$OUT/scores/seed$SEED0/ppo.jsonl" \
  mappo="$OUT/scores/seed$SEED0/mappo.jsonl" --title "Held-out RM scores of the final policies (cf. paper Fig. 3)" \
  --out "$OUT/fig3.png"
