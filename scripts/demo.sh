#!/usr/bin/env bash
# README's first command: create/refresh the environment, then run the whole pipeline on the embedded default
# (synthetic review-sentiment preferences, a tiny Gemma, CPU): SFT -> reward model -> PPO and MA-PPO (n=5),
# the reward model under plain transformers / TRL scoring, and the summary. Its time is in its record
# (docs/demo/record.json, the README's demo table); one intra-op thread per process (scripts/threads.sh).
# Outputs in $DEMO_DIR (default outputs/demo); record.json there is what the README's demo table is rendered from
# (docs/demo/record.json, python -m evaluation.pipeline_record); last, this run's final figures beside that record's,
# with whether a difference is another machine's bits (CPU model / ISA level differ) or a real change.
set -euo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
source "$(dirname "${BASH_SOURCE[0]}")/reproduce/env.sh"  # also scripts/threads.sh
export DS_ACCELERATOR="${DS_ACCELERATOR:-cpu}"
OUT="${DEMO_DIR:-outputs/demo}"
mkdir -p "$OUT"
: > "$OUT/times.txt"
source scripts/demo_flags.sh
demo_ppo_flags "$OUT/sft" "$OUT/rm"

echo "== step 1: SFT (tiny Gemma on the synthetic SFT split) =="
timed sft "$PY" training/step1_supervised_finetuning/main.py "${DEMO_SFT_FLAGS[@]}" --output_dir "$OUT/sft" \
  --seed 1234

echo "== step 2: reward model (from the SFT model, synthetic RM split) =="
timed rm "$PY" training/step2_reward_model_finetuning/main.py --model_name_or_path "$OUT/sft" "${DEMO_RM_FLAGS[@]}" \
  --output_dir "$OUT/rm" --seed 1234

echo "== the reward model outside the project (plain transformers, TRL conventions; 200 held-out pairs) =="
timed interop "$PY" -m evaluation.rm_interop --reward_model "$OUT/rm" --data_name synthetic | tee "$OUT/interop.txt"

echo "== step 3: vanilla PPO (n = 1) =="
timed ppo "$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" --seed 1234 --termination fixed \
  --ngram 1 --output_dir "$OUT/ppo"
echo "== step 3: MA-PPO (fixed 5-gram) =="
timed mappo "$PY" training/step3_rlhf_finetuning/main.py "${DEMO_PPO_FLAGS[@]}" --seed 1234 --termination fixed \
  --ngram 5 --output_dir "$OUT/mappo"

"$PY" -m evaluation.training_summary "$OUT/sft" "$OUT/rm" "$OUT/ppo" "$OUT/mappo"
"$PY" -m evaluation.pipeline_record collect "$OUT" sft rm ppo mappo
echo "== this run's final figures beside the committed record's (docs/demo/record.json) =="
"$PY" -m evaluation.pipeline_record compare "$OUT/record.json" docs/demo/record.json
