#!/usr/bin/env bash
# README's first command: create/refresh the environment, then run the whole pipeline on the embedded default
# (synthetic review-sentiment preferences, a tiny Gemma, CPU): SFT -> reward model -> PPO and MA-PPO (n=5),
# and print the summary. About 10 minutes on 2 CPU cores. Outputs in $DEMO_DIR (default outputs/demo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}" TOKENIZERS_PARALLELISM=false
PY="$ROOT/.venv/bin/python"
OUT="${DEMO_DIR:-outputs/demo}"
source "$ROOT/scripts/demo_flags.sh"
demo_ppo_flags "$OUT/sft" "$OUT/rm"

echo "== step 1: SFT (tiny Gemma on the synthetic SFT split) =="
"$PY" training/step1_supervised_finetuning/main.py "${DEMO_SFT_FLAGS[@]}" --output_dir "$OUT/sft" --seed 1234

echo "== step 2: reward model (from the SFT model, synthetic RM split) =="
"$PY" training/step2_reward_model_finetuning/main.py --model_name_or_path "$OUT/sft" "${DEMO_RM_FLAGS[@]}" \
  --output_dir "$OUT/rm" --seed 1234

echo "== step 3: vanilla PPO (n = 1) =="
"$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" --seed 1234 --termination fixed --ngram 1 \
  --output_dir "$OUT/ppo"
echo "== step 3: MA-PPO (fixed 5-gram) =="
"$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" --seed 1234 --termination fixed --ngram 5 \
  --output_dir "$OUT/mappo"

"$PY" -m evaluation.training_summary "$OUT/sft" "$OUT/rm" "$OUT/ppo" "$OUT/mappo"
