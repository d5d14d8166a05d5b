#!/usr/bin/env bash
# The pre-registered reasoning comparison (docs/study/plans/reasoning.md and its amendment 3): would macro actions
# hurt math reasoning?
# On the embedded arithmetic task with the answer verifier as reward: GRPO vs MA-GRPO (--ratio macro_geo with
# --termination step, and with fixed 5-grams) and PPO vs MA-PPO (critic, --termination step), 8 PPO seeds per arm,
# one SFT model, the same budget. Runs JOBS at a time (default 1) at nice 10, seed by seed; each run's record (arm,
# seed, started_at, commit, machine, load, wall and CPU time, accuracy at every evaluation, failed) is appended to
# RUNS, a finished run is not run again, a failed one is recorded and the next goes on.
#   bash scripts/reproduce/reasoning.sh            # SFT if missing, then the 40 runs, the verdicts and the figure
#   JOBS=2 STOP_AFTER=$(date -d 16:50 +%s) bash ...  # two at a time; start no run after that time (then run again)
#   SFT_STEPS=720 bash ...                           # the SFT model's optimizer steps (amendment 3's candidates)
# Outputs: $OUT (default outputs/reasoning): sft/, ARM/seedS/; RUNS (default docs/study/reasoning-amendment-3.jsonl)
# and docs/study/reasoning.png. Time: each run's wall and CPU time are in its record; the SFT model's on
# docs/reasoning.md (2-core development machine shared with other jobs).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"
OUT="${OUT:-outputs/reasoning}"
RUNS="${RUNS:-docs/study/reasoning-amendment-3.jsonl}"
SEEDS="${SEEDS:-1 2 3 4 5 6 7 8}"
JOBS="${JOBS:-1}"
SFT_STEPS="${SFT_STEPS:-720}"  # amendment 4: the comparison's SFT model (amendment 3's candidates 720, 750, 780)
mkdir -p "$OUT"
if ! have "$OUT/sft"; then
  nice -n 10 "$PY" training/step1_supervised_finetuning/main.py --model_name_or_path tiny-gemma \
    --data_name arithmetic --data_split 5,0,5 --num_train_epochs 2 --max_steps "$SFT_STEPS" --per_device_train_batch_size 16 \
    --learning_rate 2e-3 --warmup_ratio 0.05 --max_seq_len 160 --max_eval_samples 200 --log_steps 50 \
    --no_progress_bar --seed 1234 --output_dir "$OUT/sft"
fi
COMMON=(--reward verifier --verifier_format_weight 0 --data_name arithmetic --data_split 5,0,5
        --actor_model_name_or_path "$OUT/sft" --max_prompt_seq_len 64 --max_new_tokens 112 --temperature 1.0 --top_k 0
        --per_device_generation_batch_size 4 --num_samples_per_prompt 4 --per_device_train_batch_size 8
        --actor_learning_rate 2e-4 --critic_learning_rate 5e-4 --warmup_steps 2 --kl_coef 0.01
        --max_steps 8 --eval_steps 4 --max_eval_samples 64 --per_device_eval_batch_size 64 --eval_temperature 0
        --log_steps 4 --log_samples 0 --no_progress_bar)
declare -A ARMS=(
  [grpo]="--algo grpo"
  [ma-grpo-step]="--algo grpo --ratio macro_geo --termination step"
  [ma-grpo-fixed5]="--algo grpo --ratio macro_geo --termination fixed --ngram 5"
  [ppo]="--algo ppo --termination fixed --ngram 1"
  [ma-ppo-step]="--algo ppo --termination step"
)
ORDER=(grpo ma-grpo-step ma-grpo-fixed5 ppo ma-ppo-step)
recorded() { [ -f "$RUNS" ] && grep -q "\"arm\": \"$1\", \"seed\": $2," "$RUNS"; }
one_run() {  # ARM SEED: the run, its wall and CPU time (bash's `times` in this subshell: its children's), its record
  local arm=$1 seed=$2 dir="$OUT/$1/seed$2" started start wall cpu
  rm -rf "$dir"
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  start=$(date +%s.%N)
  times > "$OUT/.cpu_before-$arm-$seed"
  # shellcheck disable=SC2086  # the arm's flags are words
  nice -n 10 "$PY" training/step3_rlhf_finetuning/main.py "${COMMON[@]}" ${ARMS[$arm]} --seed "$seed" \
    --output_dir "$dir" > "$OUT/$arm-seed$seed.log" 2>&1 || echo "run $arm seed $seed failed (see $OUT/$arm-seed$seed.log)"
  times > "$OUT/.cpu_after-$arm-$seed"
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  cpu=$("$PY" -c "import re, sys
def cpu(p): return sum(int(m) * 60 + float(s) for m, s in re.findall(r'(\d+)m([\d.]+)s', open(p).read().splitlines()[1]))
print(round(cpu(sys.argv[2]) - cpu(sys.argv[1]), 1))" "$OUT/.cpu_before-$arm-$seed" "$OUT/.cpu_after-$arm-$seed")
  "$PY" -m evaluation.reasoning_comparison "$RUNS" --record "$arm" "$seed" "$dir" "$started" "$wall" "$cpu"
  grep "\"arm\": \"$arm\", \"seed\": $seed," "$RUNS" | cut -c1-200
}
for SEED in $SEEDS; do
  for ARM in "${ORDER[@]}"; do
    recorded "$ARM" "$SEED" && continue
    if [ -n "${STOP_AFTER:-}" ] && [ "$(date +%s)" -ge "$STOP_AFTER" ]; then
      wait
      echo "STOP_AFTER reached: no further run started; run the script again to continue"; exit 0
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    one_run "$ARM" "$SEED" &
  done
done
wait
"$PY" -m evaluation.reasoning_comparison "$RUNS" --figure docs/study/reasoning.png
