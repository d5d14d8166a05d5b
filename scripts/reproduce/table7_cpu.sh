#!/usr/bin/env bash
# Table 7 (paper Appendix C.3) on the embedded default, CPU: held-out RM score (mean ± std) of SFT, DPO, RLOO,
# GRPO, PPO and MA-PPO (n = 5), all from the same SFT model and reward model.
#   bash scripts/reproduce/table7_cpu.sh
# Reuses the SFT, RM, PPO and MA-PPO runs of scripts/demo.sh in $DEMO_DIR (default outputs/demo) and trains the
# missing ones with the demo's flags; then trains DPO (on the RM split), RLOO (K = 4) and GRPO (K = 4) into
# $OUT (default outputs/table7) and scores every policy on the validation prompts with evaluation/rm_score.py
# (one sample per prompt at temperature 0.8, the reward model of step 2; responses in $OUT/scores/*.jsonl).
# RLOO / GRPO sample 8 prompts x K = 4 per step: the same 32 rollouts and optimizer steps per iteration as PPO.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"
DEMO="${DEMO_DIR:-outputs/demo}"
OUT="${OUT:-outputs/table7}"
COMMON=(--seed 1234 --no_progress_bar)

# --- the runs of scripts/demo.sh (same flags) ---
source "$ROOT/scripts/demo_flags.sh"
if ! have "$DEMO/sft"; then
  echo "== SFT (as scripts/demo.sh) =="
  "$PY" training/step1_supervised_finetuning/main.py "${DEMO_SFT_FLAGS[@]}" --output_dir "$DEMO/sft" "${COMMON[@]}"
fi
if ! have "$DEMO/rm"; then
  echo "== reward model (as scripts/demo.sh) =="
  "$PY" training/step2_reward_model_finetuning/main.py --model_name_or_path "$DEMO/sft" "${DEMO_RM_FLAGS[@]}" \
    --output_dir "$DEMO/rm" "${COMMON[@]}"
fi
demo_ppo_flags "$DEMO/sft" "$DEMO/rm"
if ! have "$DEMO/ppo/actor"; then
  echo "== vanilla PPO, n = 1 (as scripts/demo.sh) =="
  "$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" "${COMMON[@]}" \
    --termination fixed --ngram 1 --output_dir "$DEMO/ppo"
fi
if ! have "$DEMO/mappo/actor"; then
  echo "== MA-PPO, fixed 5-gram (as scripts/demo.sh) =="
  "$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" "${COMMON[@]}" \
    --termination fixed --ngram 5 --output_dir "$DEMO/mappo"
fi

# --- the baselines of Appendix C.3 ---
if ! have "$OUT/dpo"; then
  echo "== DPO (beta 0.1, one epoch over the RM split) =="
  "$PY" training/step2_dpo_finetuning/main.py --model_name_or_path "$DEMO/sft" --data_name synthetic \
    --output_dir "$OUT/dpo" --num_train_epochs 1 --per_device_train_batch_size 16 --learning_rate 5e-5 \
    --warmup_ratio 0.05 --beta 0.1 --max_seq_len 64 --max_eval_samples 128 --eval_steps 50 --log_steps 25 \
    "${COMMON[@]}"
fi
for ALGO in rloo grpo; do
  if ! have "$OUT/$ALGO/actor"; then
    echo "== ${ALGO^^} (K = 4, no critic) =="
    "$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" "${COMMON[@]}" --algo "$ALGO" --num_samples_per_prompt 4 \
      --per_device_generation_batch_size 8 --output_dir "$OUT/$ALGO"
  fi
done

echo "== held-out RM score (paper Table 7 on TL;DR: SFT -0.64, DPO 0.03, RLOO 0.81, PPO 0.83, MA-PPO 1.40) =="
"$PY" -m evaluation.rm_score --reward_model "$DEMO/rm" --data_name synthetic --temperature 0.8 \
  --max_new_tokens 24 --max_prompt_len 32 --batch_size 64 --seed 1234 --output_dir "$OUT/scores" \
  --policy SFT="$DEMO/sft" --policy DPO="$OUT/dpo" --policy RLOO="$OUT/rloo/actor" \
  --policy GRPO="$OUT/grpo/actor" --policy PPO="$DEMO/ppo/actor" --policy MA-PPO="$DEMO/mappo/actor"
