# Shared by scripts/reproduce/{table2,table3,fig2,fig4,fig5,fig6,fig8}.sh (sourced, not run): train what is
# missing with the launchers of scripts/step*/ (Table 5 hyper-parameters, outputs/runs/STAGE/MODEL/TASK[/RUN]) and
# score policies on held-out prompts. Every launcher honours NUM_GPUS, HOSTFILE and MASTER_PORT (scripts/launch.sh).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# paper_size MODEL -> the paper's column for MODEL (2b, 7b or 27b)
paper_size() {
  case $1 in
    gemma-2b|codegemma-2b) echo 2b ;; gemma-7b|codegemma-7b) echo 7b ;; gemma2-27b) echo 27b ;;
    *) echo "error: unknown model $1 (gemma-2b, gemma-7b, gemma2-27b, codegemma-2b, codegemma-7b)" >&2; return 2 ;;
  esac
}

# config_value STAGE MODEL TASK KEY -> KEY's value for configs/STAGE/MODEL/TASK.yaml (its layers and defaults)
config_value() { "$PY" -m dschat.cli.show_config "$1" "configs/$1/$2/$3.yaml" "$4"; }

sft_dir() { echo "outputs/runs/sft/$1/$2"; }
rm_dir() { echo "outputs/runs/rm/$1/$2"; }
run_dir() { echo "outputs/runs/ppo/$1/$2/$3"; }

# ensure_sft_rm MODEL TASK: step 1 and (for text tasks) step 2 unless their final models exist
ensure_sft_rm() {
  have "$(sft_dir "$1" "$2")" || bash scripts/step1_sft/"$1_$2".sh
  [ "$2" = apps ] || have "$(rm_dir "$1" "$2")" || bash scripts/step2_rm/"$1_$2".sh
}

# ensure_run MODEL TASK ppo|mappo RUN_NAME [extra step-3 flags...]: step 3 unless RUN_NAME's actor exists
ensure_run() {
  local model=$1 task=$2 kind=$3 run=$4
  shift 4
  ensure_sft_rm "$model" "$task"
  have "$(run_dir "$model" "$task" "$run")/actor" || RUN_NAME=$run bash scripts/step3_rlhf/"${model}_${task}_${kind}".sh "$@"
}

# score_policies MODEL TASK OUT_DIR MAX_PROMPTS NAME=DIR... : held-out RM score of each policy (one sample per
# prompt at the training temperature, Table 5 lengths) -> OUT_DIR/NAME.jsonl
score_policies() {
  local model=$1 task=$2 out=$3 max_prompts=$4
  shift 4
  local policies=()
  for spec in "$@"; do policies+=(--policy "$spec"); done
  "$PY" -m evaluation.rm_score --reward_model "$(rm_dir "$model" "$task")" --data_name "$task" \
    --max_eval_samples "$max_prompts" --temperature "$(config_value ppo "$model" "$task" temperature)" \
    --max_new_tokens "$(config_value ppo "$model" "$task" max_new_tokens)" \
    --max_prompt_len "$(config_value ppo "$model" "$task" max_prompt_seq_len)" \
    --dtype "$(config_value ppo "$model" "$task" dtype)" --batch_size "${EVAL_BATCH_SIZE:-16}" \
    --output_dir "$out" "${policies[@]}"
}

# eval_prompts TASK -> how many held-out prompts the paper scores (§4.1: 2k for TL;DR and HH-RLHF, all of WebGPT)
eval_prompts() { [ "$1" = webgpt ] && echo 0 || echo 2000; }
