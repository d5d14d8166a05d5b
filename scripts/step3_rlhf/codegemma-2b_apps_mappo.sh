#!/usr/bin/env bash
# Step 3 MA-PPO: codegemma-2b on apps with its config's fixed n-gram (configs/ppo/); swap the rule with one flag, e.g.
#   bash scripts/step3_rlhf/codegemma-2b_apps_mappo.sh --termination parsing     (or: --termination ppl, --termination randomized, --ngram 10)
exec bash "$(dirname "$0")/../launch.sh" mappo codegemma-2b apps "$@"
