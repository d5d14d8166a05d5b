#!/usr/bin/env bash
# Step 3 MA-PPO: gemma-7b on hh-rlhf with its config's fixed n-gram (configs/ppo/); swap the rule with one flag, e.g.
#   bash scripts/step3_rlhf/gemma-7b_hh-rlhf_mappo.sh --termination parsing     (or: --termination ppl, --termination randomized, --ngram 10)
exec bash "$(dirname "$0")/../launch.sh" mappo gemma-7b hh-rlhf "$@"
