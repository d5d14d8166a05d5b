#!/usr/bin/env bash
# Step 3 (MA-PPO, the 2B launcher's config configs/ppo/gemma-2b/tldr.yaml) at the real Gemma-2B shape with random
# weights on one GPU, through DeepSpeed, and the memory plan for the same flags; prints the run's
# torch.cuda.max_memory_allocated. Sized for one 80 GB GPU (by the plan the launcher's own batches need 4):
# 16 prompts per iteration, LoRA 64 on actor and critic, prompts <= 32 tokens (the embedded task's), the launcher's
# 512 new tokens (random weights never stop early), 2 iterations, evaluation on 8 prompts; the HF rollout engine, as
# the measured run had (docs/gpu/h100_gemma2b_memory.json: the configs chose vLLM after it).
#   WHEELS=DIR bash scripts/benchmarks/gpu/step3_gemma2b.sh
# WHEELS: a folder of wheels / sdists to install first when the GPU machine lacks them (offline), e.g. deepspeed,
# hjson, pydantic (+ pydantic-core, annotated-types, typing-inspection). TORCH_CUDA_ARCH_LIST=9.0: DeepSpeed 0.19.8
# cannot parse torch's "9.0a" architecture when it JIT-builds FusedAdam on an H100.
# The output directory's free-space check is skipped (the random checkpoints fill the disk; nothing is saved).
set -eo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
export PYTHONPATH=$PWD TOKENIZERS_PARALLELISM=false TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
MODEL="${MODEL:-/tmp/g2b}"
OUT="${OUT:-/tmp/step3-gemma2b}"
if [ -n "${WHEELS:-}" ]; then
  python -m pip install -q --no-index --find-links "$WHEELS" hjson annotated-types typing-inspection pydantic
  python -m pip install -q --no-index --no-build-isolation --no-deps "$WHEELS"/deepspeed-*.tar.gz
fi
[ -f "$MODEL-rm/config.json" ] || python scripts/benchmarks/gpu/make_random_gemma2b.py "$MODEL"
FLAGS=(--config configs/ppo/gemma-2b/tldr.yaml --data_name synthetic --actor_model_name_or_path "$MODEL"
  --critic_model_name_or_path "$MODEL-rm" --global_batch_size 16 --max_prompt_seq_len 32 --max_steps 2
  --max_eval_samples 8 --save_steps 0 --no_progress_bar --log_steps 1 --actor_lora_dim 64 --critic_lora_dim 64
  --rollout_engine hf --output_dir "$OUT")
python -m dschat.cli.plan configs/ppo/gemma-2b/tldr.yaml --num_gpus 1 "${FLAGS[@]:2}"
start=$(date +%s)
python -c "
import atexit, runpy, sys, torch
import dschat.training.loop as loop
loop.require_checkpoint_space = lambda *a, **k: None
atexit.register(lambda: print('peak allocated %.2f GiB, peak reserved %.2f GiB' % (
    torch.cuda.max_memory_allocated() / 2**30, torch.cuda.max_memory_reserved() / 2**30), flush=True))
sys.argv = ['dschat.cli.ppo', *sys.argv[1:]]
runpy.run_module('dschat.cli.ppo', run_name='__main__')
" "${FLAGS[@]}"
echo "step 3: $(( $(date +%s) - start )) s wall (loading, FusedAdam build, 2 evaluations, 2 iterations, final save)"
