#!/usr/bin/env bash
# Fig. 8 (paper §4.4) and Fig. 21 (Appendix D.4): best-of-N RM score of SFT, vanilla PPO and MA-PPO for
# N in {4, 8, 16, 32} and sampling temperatures T in {0.2, ..., 1.2}, and the mean RM score (N = 1) vs T.
#   bash scripts/reproduce/fig8.sh MODEL [TASK]          MODEL: gemma-2b (the paper's) | gemma-7b; TASK: tldr
# NUM_PROMPTS held-out prompts (default 200) x 32 samples per temperature per policy; samples are kept and reused.
# Outputs: outputs/reproduce/fig8/MODEL/TASK/{fig8.png, fig21.png, best_of_n.json, samples/}.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 1 ] || { sed -n '2,6p' "${BASH_SOURCE[0]}"; exit 2; }
MODEL=$1 TASK=${2:-tldr}
ensure_run "$MODEL" "$TASK" ppo ppo
ensure_run "$MODEL" "$TASK" mappo mappo
"$PY" -m evaluation.best_of_n --reward_model "$(rm_dir "$MODEL" "$TASK")" --data_name "$TASK" \
  --policy SFT="$(sft_dir "$MODEL" "$TASK")" --policy PPO="$(run_dir "$MODEL" "$TASK" ppo)" \
  --policy MA-PPO="$(run_dir "$MODEL" "$TASK" mappo)" --num_prompts "${NUM_PROMPTS:-200}" \
  --temperatures 0.2,0.4,0.6,0.8,1.0,1.2 --ns 4,8,16,32 \
  --max_new_tokens "$(config_value ppo "$MODEL" "$TASK" max_new_tokens)" \
  --max_prompt_len "$(config_value ppo "$MODEL" "$TASK" max_prompt_seq_len)" \
  --batch_size "${EVAL_BATCH_SIZE:-16}" --output_dir "outputs/reproduce/fig8/$MODEL/$TASK"
