#!/usr/bin/env bash
# Launch one stage for one model and task with the paper's Table 5 hyper-parameters from configs/.
#   bash scripts/launch.sh STAGE MODEL TASK [extra flags...]
#   STAGE: sft | rm | dpo | ppo     MODEL: gemma-2b | gemma-7b | gemma2-27b | codegemma-2b | codegemma-7b
#   TASK:  tldr | hh-rlhf | webgpt | apps
# Environment overrides:
#   MODEL_PATH   base model for sft (default: the hub id of MODEL)
#   SFT_PATH     SFT checkpoint for rm/dpo/ppo (default: outputs/sft/MODEL/TASK)
#   RM_PATH      reward model for ppo (default: outputs/rm/MODEL/TASK; unused for code tasks)
#   OUTPUT_DIR   default: outputs/STAGE/MODEL/TASK[/RUN_NAME]
#   RUN_NAME     sub-directory for the run (ppo variants use it: ppo, mappo-fixed5, rloo, ...)
#   NUM_GPUS     processes on this node (default: all visible GPUs, or 1)
#   HOSTFILE     DeepSpeed hostfile for multi-node runs
#   MASTER_PORT  rendezvous port (default 29500)
# Extra flags are passed to the stage's main.py and override the config (e.g. --termination parsing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -lt 3 ]; then sed -n '2,19p' "${BASH_SOURCE[0]}"; exit 2; fi
STAGE=$1 MODEL=$2 TASK=$3; shift 3
CONFIG="$ROOT/configs/$STAGE/$MODEL/$TASK.yaml"
[ -f "$CONFIG" ] || { echo "error: no config $CONFIG (stage/model/task not in Table 5)" >&2; exit 2; }
case $MODEL in
  gemma-2b) HUB=google/gemma-2b ;; gemma-7b) HUB=google/gemma-7b ;; gemma2-27b) HUB=google/gemma-2-27b ;;
  codegemma-2b) HUB=google/codegemma-1.1-2b ;; codegemma-7b) HUB=google/codegemma-1.1-7b-it ;;
esac
SFT_PATH=${SFT_PATH:-outputs/sft/$MODEL/$TASK}
RM_PATH=${RM_PATH:-outputs/rm/$MODEL/$TASK}
OUTPUT_DIR=${OUTPUT_DIR:-outputs/$STAGE/$MODEL/$TASK${RUN_NAME:+/$RUN_NAME}}
if [ -z "${NUM_GPUS:-}" ]; then
  NUM_GPUS=$(command -v nvidia-smi >/dev/null && nvidia-smi -L | wc -l || echo 1)
  [ "$NUM_GPUS" -gt 0 ] || NUM_GPUS=1
fi
case $STAGE in
  sft) MAIN=training/step1_supervised_finetuning/main.py; MODEL_ARGS=(--model_name_or_path "${MODEL_PATH:-$HUB}") ;;
  rm) MAIN=training/step2_reward_model_finetuning/main.py; MODEL_ARGS=(--model_name_or_path "$SFT_PATH") ;;
  dpo) MAIN=training/step2_dpo_finetuning/main.py; MODEL_ARGS=(--model_name_or_path "$SFT_PATH") ;;
  ppo) MAIN=training/step3_rlhf_finetuning/main.py
       MODEL_ARGS=(--actor_model_name_or_path "$SFT_PATH")
       [ "$TASK" = apps ] || MODEL_ARGS+=(--critic_model_name_or_path "$RM_PATH" --reward_model_name_or_path "$RM_PATH") ;;
  *) echo "error: STAGE must be sft, rm, dpo or ppo (got $STAGE)" >&2; exit 2 ;;
esac
LAUNCH=(deepspeed --num_gpus "$NUM_GPUS" --master_port "${MASTER_PORT:-29500}")
[ -n "${HOSTFILE:-}" ] && LAUNCH=(deepspeed --hostfile "$HOSTFILE" --master_port "${MASTER_PORT:-29500}")
PY="$ROOT/.venv/bin"
[ -x "$PY/deepspeed" ] && LAUNCH[0]="$PY/deepspeed"
cd "$ROOT"
mkdir -p "$OUTPUT_DIR"
set -x
exec "${LAUNCH[@]}" "$MAIN" --config "$CONFIG" "${MODEL_ARGS[@]}" --output_dir "$OUTPUT_DIR" "$@"
