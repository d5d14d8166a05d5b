# The embedded-default training flags, sourced by scripts/demo.sh and the CPU reproduction scripts so they
# cannot drift apart. Defines bash arrays; the callers add --output_dir, --seed and the rule flags.
#   DEMO_SFT_FLAGS   step 1 from tiny-gemma
#   DEMO_RM_FLAGS    step 2, after --model_name_or_path SFT_DIR
#   demo_ppo_flags SFT_DIR RM_DIR   sets DEMO_PPO_FLAGS for step 3 (PPO and MA-PPO share them)
DEMO_SFT_FLAGS=(--model_name_or_path tiny-gemma --data_name synthetic --num_train_epochs 6
                --per_device_train_batch_size 16 --learning_rate 2e-3 --warmup_ratio 0.05 --max_seq_len 64
                --log_steps 25 --no_progress_bar)
DEMO_RM_FLAGS=(--data_name synthetic --num_train_epochs 2 --per_device_train_batch_size 16 --learning_rate 5e-4
               --warmup_ratio 0.05 --max_seq_len 64 --log_steps 25 --no_progress_bar)
demo_ppo_flags() {
  DEMO_PPO_FLAGS=(--actor_model_name_or_path "$1" --critic_model_name_or_path "$2" --data_name synthetic
                  --max_prompt_seq_len 32 --max_new_tokens 24 --per_device_generation_batch_size 32
                  --per_device_train_batch_size 16 --actor_learning_rate 2e-4 --critic_learning_rate 5e-4
                  --warmup_steps 5 --kl_coef 0.05 --max_steps 60 --eval_steps 10 --max_eval_samples 128
                  --per_device_eval_batch_size 64 --log_steps 10 --log_samples 1 --no_progress_bar)
}
