#!/usr/bin/env bash
# Launch one stage for one model and task with the paper's Table 5 hyper-parameters from configs/.
#   bash scripts/launch.sh STAGE MODEL TASK [extra flags...]
#   STAGE: sft | rm | dpo | ppo (vanilla PPO, n = 1) | mappo (MA-PPO, the config's n: 5 text, 10 code)
#   MODEL: gemma-2b | gemma-7b | gemma2-27b | codegemma-2b | codegemma-7b    TASK: tldr | hh-rlhf | webgpt | apps
# Batch sizes are global in the configs (Table 5); micro batches and accumulation follow from the process count.
# Environment overrides:
#   MODEL_PATH   base model for sft (default: the hub id in configs/sft/MODEL.yaml)
#   SFT_PATH     SFT checkpoint for rm/dpo/ppo (default: OUTPUT_ROOT/sft/MODEL/TASK)
#   RM_PATH      reward model for ppo (default: OUTPUT_ROOT/rm/MODEL/TASK; unused for code tasks)
#   OUTPUT_ROOT  default: outputs/runs (apart from the README's outputs/sft, outputs/rm, ...: no run lands inside
#                another stage's model folder)
#   OUTPUT_DIR   default: OUTPUT_ROOT/STAGE/MODEL/TASK, for ppo/mappo OUTPUT_ROOT/ppo/MODEL/TASK/RUN_NAME
#   RUN_NAME     ppo/mappo run folder (default: ppo or mappo, plus the method flags given, e.g. mappo-parsing)
#   NUM_GPUS     GPUs used on this node (default: all visible GPUs, or 1); one process each, or, with ROLLOUT_GPUS,
#                all but the last ROLLOUT_GPUS
#   ROLLOUT_GPUS step 3 with --async_rollout K: the node's last ROLLOUT_GPUS GPUs sample (the rollout producers,
#                --rollout_gpus; ROLLOUT_GPUS must divide the training processes), the first NUM_GPUS - ROLLOUT_GPUS
#                train (default 0: every GPU trains)
#   HOSTFILE     DeepSpeed hostfile for multi-node runs
#   MASTER_PORT  rendezvous port (default 29500)
#   MARLHF_THREADS  intra-op CPU threads per process (default 1, scripts/threads.sh)
#   PREFLIGHT    0 skips the pre-flight: before anything starts or any folder is made, the stage's --dry_run checks
#                the flags, GPUs, models (gated Gemma: token and licence), data, disk, the memory plan and the output
#                folder, and lists every missing thing at once (exit 2). With --dry_run among the extra flags the
#                pre-flight is all that runs (PREFLIGHT=0 or not): no folder, no training.log, no deepspeed
#   PYTHON       the interpreter of the pre-flight (default: the deepspeed's environment, else .venv)
# Extra flags are passed to the stage and override the config (e.g. --termination parsing).
# The run's output is also appended to OUTPUT_DIR/training.log.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/threads.sh"
if [ $# -lt 3 ]; then awk 'NR > 1 && !/^#/ {exit} NR > 1' "${BASH_SOURCE[0]}"; exit 2; fi
STAGE=$1 MODEL=$2 TASK=$3; shift 3
METHOD_FLAGS=()
case $STAGE in
  sft) MAIN=training/step1_supervised_finetuning/main.py ;;
  rm) MAIN=training/step2_reward_model_finetuning/main.py ;;
  dpo) MAIN=training/step2_dpo_finetuning/main.py ;;
  ppo) MAIN=training/step3_rlhf_finetuning/main.py; METHOD_FLAGS=(--ngram 1) ;;
  mappo) MAIN=training/step3_rlhf_finetuning/main.py ;;
  *) echo "error: STAGE must be sft, rm, dpo, ppo or mappo (got $STAGE)" >&2; exit 2 ;;
esac
CONFIG_STAGE=${STAGE/mappo/ppo}
CONFIG="configs/$CONFIG_STAGE/$MODEL/$TASK.yaml"
[ -f "$ROOT/$CONFIG" ] || { echo "error: no config $CONFIG (stage/model/task not in Table 5)" >&2; exit 2; }

# run_suffix FLAGS...: "-VALUE" for each flag that changes the step-3 method, so variants get their own folder
run_suffix() {
  local suffix="" flag
  while [ $# -gt 0 ]; do
    flag=$1; shift
    case $flag in
      --termination|--algo|--sigma|--value_function|--reward_agg|--macro_reward|--ratio|--ma_ratio|--parser)
        [ $# -gt 0 ] && { suffix+="-$1"; shift; } ;;
      --ngram) [ $# -gt 0 ] && { suffix+="-n$1"; shift; } ;;
    esac
  done
  echo "$suffix"
}

OUTPUT_ROOT=${OUTPUT_ROOT:-outputs/runs}
SFT_PATH=${SFT_PATH:-$OUTPUT_ROOT/sft/$MODEL/$TASK}
RM_PATH=${RM_PATH:-$OUTPUT_ROOT/rm/$MODEL/$TASK}
case $STAGE in
  sft) MODEL_ARGS=(); [ -z "${MODEL_PATH:-}" ] || MODEL_ARGS=(--model_name_or_path "$MODEL_PATH") ;;
  rm|dpo) MODEL_ARGS=(--model_name_or_path "$SFT_PATH") ;;
  ppo|mappo)
    MODEL_ARGS=(--actor_model_name_or_path "$SFT_PATH")
    [ "$TASK" = apps ] || MODEL_ARGS+=(--critic_model_name_or_path "$RM_PATH" --reward_model_name_or_path "$RM_PATH")
    RUN_NAME=${RUN_NAME:-$STAGE$(run_suffix "$@")} ;;
esac
OUTPUT_DIR=${OUTPUT_DIR:-$OUTPUT_ROOT/$CONFIG_STAGE/$MODEL/$TASK${RUN_NAME:+/$RUN_NAME}}
if [ -z "${NUM_GPUS:-}" ]; then
  NUM_GPUS=$(command -v nvidia-smi >/dev/null && nvidia-smi -L | wc -l || echo 1)
  [ "$NUM_GPUS" -gt 0 ] || NUM_GPUS=1
fi
# the deepspeed on PATH (an activated environment), else the project's .venv
DEEPSPEED=$(command -v deepspeed || echo "$ROOT/.venv/bin/deepspeed")
ROLLOUT_GPUS=${ROLLOUT_GPUS:-0}
[[ "$ROLLOUT_GPUS" =~ ^[0-9]+$ ]] || { echo "error: ROLLOUT_GPUS=$ROLLOUT_GPUS: expected a GPU count" >&2; exit 2; }
TRAIN_GPUS=$((NUM_GPUS - ROLLOUT_GPUS))
if [ "$ROLLOUT_GPUS" -gt 0 ]; then
  [ "$TRAIN_GPUS" -gt 0 ] || { echo "error: ROLLOUT_GPUS=$ROLLOUT_GPUS leaves none of the $NUM_GPUS GPUs to train" >&2; exit 2; }
  set -- "$@" --rollout_gpus $(seq "$TRAIN_GPUS" $((NUM_GPUS - 1)))
fi
LAUNCH=("$DEEPSPEED" --num_gpus "$TRAIN_GPUS" --master_port "${MASTER_PORT:-29500}")
[ -n "${HOSTFILE:-}" ] && LAUNCH=("$DEEPSPEED" --hostfile "$HOSTFILE" --num_gpus "$TRAIN_GPUS" --master_port "${MASTER_PORT:-29500}")
cd "$ROOT"
DRY_RUN=0
for flag in "$@"; do [ "$flag" != --dry_run ] || DRY_RUN=1; done
if [ "${PREFLIGHT:-1}" != 0 ] || [ "$DRY_RUN" = 1 ]; then
  PY=${PYTHON:-$(dirname "$DEEPSPEED")/python}
  [ -x "$PY" ] || PY="$ROOT/.venv/bin/python"
  PREFLIGHT_FLAGS=("$@")
  [ "$DRY_RUN" = 1 ] || PREFLIGHT_FLAGS+=(--dry_run)
  WORLD_SIZE=$TRAIN_GPUS "$PY" "$MAIN" --config "$CONFIG" "${MODEL_ARGS[@]}" --output_dir "$OUTPUT_DIR" \
    "${METHOD_FLAGS[@]}" "${PREFLIGHT_FLAGS[@]}" || exit 2
  [ "$DRY_RUN" = 0 ] || exit 0  # --dry_run: the pre-flight was the whole command
fi
mkdir -p "$OUTPUT_DIR"
# everything the run prints (the command first) also goes to OUTPUT_DIR/training.log, appended across resumes
COMMAND=("${LAUNCH[@]}" "$MAIN" --config "$CONFIG" "${MODEL_ARGS[@]}" --output_dir "$OUTPUT_DIR" "${METHOD_FLAGS[@]}" "$@")
export PYTHONUNBUFFERED=1  # lines reach the log (and the terminal) as they are printed, not in blocks
echo "+ ${COMMAND[*]}" | tee -a "$OUTPUT_DIR/training.log" >&2
"${COMMAND[@]}" 2>&1 | tee -a "$OUTPUT_DIR/training.log"
exit "${PIPESTATUS[0]}"
