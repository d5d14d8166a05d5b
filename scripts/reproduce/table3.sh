#!/usr/bin/env bash
# Table 3 (paper §4.5): pass@1 and pass@5 of vanilla PPO and MA-PPO (fixed 10-gram) on the APPS test set.
#   bash scripts/reproduce/table3.sh MODEL [extra evaluation.code_samples flags]   MODEL: codegemma-2b | codegemma-7b
# Trains what is missing (SFT, PPO and MA-PPO with the execution reward; Table 5 configs), samples 5 programs per
# APPS test problem from each final policy (evaluation/code_samples.py), runs them in the sandbox and reports
# pass@k per difficulty (python -m evaluation.pass_at_k), then prints the paper's Table 3 for the same size.
# Samples: outputs/reproduce/table3/MODEL/{tasks,PPO,MA-PPO}.jsonl. E.g. --max_tasks 500 for a quicker subset.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { sed -n '2,7p' "${BASH_SOURCE[0]}"; exit 2; }
MODEL=$1; shift
SIZE=$(paper_size "$MODEL")
ensure_run "$MODEL" apps ppo ppo
ensure_run "$MODEL" apps mappo mappo
OUT=outputs/reproduce/table3/$MODEL
"$PY" -m evaluation.code_samples --data_name apps --split test --num_samples 5 \
  --max_prompt_len "$(config_value ppo "$MODEL" apps max_prompt_seq_len)" \
  --max_new_tokens "$(config_value ppo "$MODEL" apps max_new_tokens)" --output_dir "$OUT" \
  --policy PPO="$(run_dir "$MODEL" apps ppo)" --policy MA-PPO="$(run_dir "$MODEL" apps mappo)" "$@"
"$PY" -m evaluation.pass_at_k --samples "$OUT/PPO.jsonl" "$OUT/MA-PPO.jsonl" --labels PPO MA-PPO \
  --tasks "$OUT/tasks.jsonl" --k 1 5 --details "$OUT/details.jsonl"
"$PY" -m evaluation.paper_numbers table3 --size "$SIZE"
