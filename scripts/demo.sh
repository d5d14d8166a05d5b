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
COMMON=(--seed 1234 --no_progress_bar)

echo "== step 1: SFT (tiny Gemma on the synthetic SFT split) =="
"$PY" training/step1_supervised_finetuning/main.py --model_name_or_path tiny-gemma --data_name synthetic \
  --output_dir "$OUT/sft" --num_train_epochs 6 --per_device_train_batch_size 16 --learning_rate 2e-3 \
  --warmup_ratio 0.05 --max_seq_len 64 --log_steps 25 "${COMMON[@]}"

echo "== step 2: reward model (from the SFT model, synthetic RM split) =="
"$PY" training/step2_reward_model_finetuning/main.py --model_name_or_path "$OUT/sft" --data_name synthetic \
  --output_dir "$OUT/rm" --num_train_epochs 2 --per_device_train_batch_size 16 --learning_rate 5e-4 \
  --warmup_ratio 0.05 --max_seq_len 64 --log_steps 25 "${COMMON[@]}"

PPO=(--actor_model_name_or_path "$OUT/sft" --critic_model_name_or_path "$OUT/rm" --data_name synthetic
     --max_prompt_seq_len 32 --max_answer_seq_len 24 --per_device_generation_batch_size 32
     --per_device_training_batch_size 16 --actor_learning_rate 2e-4 --critic_learning_rate 5e-4
     --num_warmup_steps 5 --kl_coef 0.05 --max_steps 60 --eval_steps 10 --max_eval_samples 128
     --per_device_eval_batch_size 64 --log_steps 10 --log_samples 1 "${COMMON[@]}")
echo "== step 3: vanilla PPO (n = 1) =="
"$PY" training/step3_rlhf_finetuning/main.py "${PPO[@]}" --termination fixed --ngram 1 --output_dir "$OUT/ppo"
echo "== step 3: MA-PPO (fixed 5-gram) =="
"$PY" training/step3_rlhf_finetuning/main.py "${PPO[@]}" --termination fixed --ngram 5 --output_dir "$OUT/mappo"

"$PY" -m evaluation.training_summary "$OUT/sft" "$OUT/rm" "$OUT/ppo" "$OUT/mappo"
