#!/usr/bin/env bash
# Mutation testing of step 3's wires (flags -> trainer -> maths) and DPO's beta with mutmut (requirements-dev.txt):
#   bash scripts/mutation.sh [TEST ...]
# mutates the functions FUNCTIONS names (globs over mutmut's mutant names; default below) of the files in
# scripts/mutation.cfg, runs each mutant against the selected tests (default: TESTS below; mutmut runs, per mutant,
# only the selected tests that call the mutated function, stopping at the first failure) in a scratch copy of the
# project (nothing in the checkout changes), and prints the mutation score and every surviving mutant.
# CPU-heavy: runs under nice, one mutant at a time (MUTATION_CHILDREN=N for more); MUTATION_DIR keeps the copy;
# PYTHON picks the interpreter (default .venv/bin/python; mutmut may also come from PYTHONPATH);
# MUTATION_MIN_SCORE=P exits non-zero when the score is below P percent (for CI).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(tests/test_wires.py tests/test_wires_constants.py tests/test_layering.py
  tests/test_macro_termination.py tests/test_parsing_termination.py
  tests/test_viewer.py::test_options_mean_what_step3_makes_of_them
  tests/test_entropy_termination.py::test_cli_flags_reach_the_rule_options tests/test_dpo.py::test_loss_and_implicit_rewards_match_a_hand_computation
  tests/test_dpo.py::test_non_positive_beta_is_rejected tests/test_dpo.py::test_dpo_loss_refuses_a_non_positive_beta_naming_it
  tests/test_dpo.py::test_dpo_loss_refuses_a_mismatched_shape_naming_the_tensor
  tests/test_stage_ppo_code.py::test_code_flags_reach_both_reward_sources
  tests/test_ppo_semantics.py::test_logprobs_use_the_sampling_temperature
  tests/test_rollout_correction.py::test_rollout_is_flags_reach_the_policy_loss
  tests/test_rlhf_engine.py::test_eval_temperature_zero_decodes_greedily
  tests/test_stage_ppo_code.py::test_make_trainer_hands_the_rule_its_seed_per_rank_and_the_code_parser
  tests/test_model_utils.py::test_train_ds_config_is_what_deepspeed_reads
  tests/test_model_utils.py::test_train_ds_config_names_the_flag_it_refuses
  tests/test_rlhf_engine.py::test_role_config_carries_every_engine_flag_at_a_non_default_value
  tests/test_rlhf_engine.py::test_each_trained_model_gets_its_own_engine_flags
  tests/test_objective.py::test_scale_rewards_reaches_the_estimator_each_algo_builds
  tests/test_batch_statistics.py)
# The default functions, every one a flag passes through on its way to the maths of step 3 and DPO:
# round 1 (issue 17): the per-token rewards, the termination flags -> rule options, the --ngram parser, the parsing
# rule's fallback; round 2 (issue 32): the estimator construction of each --algo, micro_batch_losses, the engine
# config of step 3's models (role_config) and DeepSpeed's (get_train_ds_config), the stage's sampling configs, trainer
# and reward sources, and DPO's loss. FUNCTIONS=ROUND1 / ROUND2 selects one round; CI's slow stage runs FAST.
ROUND1="*with_advantages* *termination_options* *ngram_length* *_row_lengths*"
ROUND2="*micro_batch_losses* *MacroGAEEstimator*__call__* *x__macro_gae__* *x__sequence_baseline__* *x__reinforce__*
  *build_advantage_estimator* *role_config* *get_train_ds_config* *sampling_configs* *make_trainer*
  *make_reward_sources* *x_dpo_loss__* *x_implicit_rewards__* *x_dpo_batch__*"
FAST="*x__macro_gae__* *x__sequence_baseline__* *x__reinforce__* *build_advantage_estimator* *sampling_configs*
  *x_dpo_loss__* *x_implicit_rewards__* *x_dpo_batch__*"
case "${FUNCTIONS:-ALL}" in
  ALL) FUNCTIONS="$ROUND1 $ROUND2" ;;
  ROUND1) FUNCTIONS="$ROUND1" ;;
  ROUND2) FUNCTIONS="$ROUND2" ;;
  FAST) FUNCTIONS="$FAST" ;;
esac
WORK=${MUTATION_DIR:-$(mktemp -d)}
mkdir -p "$WORK"
for path in dschat tests training configs scripts evaluation pytest.ini setup.py; do
  rm -rf "${WORK:?}/$path"
  cp -r "$ROOT/$path" "$WORK/$path"
done
find "$WORK" -name __pycache__ -prune -exec rm -rf {} +
{ cat "$ROOT/scripts/mutation.cfg"; printf 'pytest_add_cli_args_test_selection =\n'; printf '    %s\n' "${TESTS[@]}"; } \
  > "$WORK/setup.cfg"
cd "$WORK"
mkdir -p mutants  # on sys.path from the start: a folder missing when Python starts is never searched later
export PYTHONPATH="$WORK/mutants${PYTHONPATH:+:$PYTHONPATH}" DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
       TORCH_EXTENSIONS_DIR="$ROOT/.torch_ext"
# shellcheck disable=SC2086  # FUNCTIONS is a list of globs
nice -n 10 "$PY" -m mutmut run --max-children "${MUTATION_CHILDREN:-1}" $FUNCTIONS > "$WORK/run.log" 2>&1 \
  || { tail -30 "$WORK/run.log"; exit 1; }
"$PY" -m mutmut results --all true > "$WORK/results.txt" 2>&1 || true
"$PY" - "$WORK/results.txt" "${MUTATION_MIN_SCORE:-0}" <<'PYEOF'
import re, sys
rows = [line.split(": ") for line in open(sys.argv[1]) if re.match(r"\s*\S+__mutmut_\d+: ", line)]
status = {name.strip(): state.strip() for name, state in rows if state.strip() != "not checked"}  # FUNCTIONS' only
killed = sum(state in ("killed", "timeout", "caught by type check") for state in status.values())
survived = sorted(name for name, state in status.items() if state in ("survived", "no tests"))
other = {name: state for name, state in status.items() if state not in ("killed", "timeout", "survived", "no tests")}
print(f"mutation score: {killed}/{len(status)} killed ({100 * killed / max(len(status), 1):.1f}%), "
      f"{len(survived)} survived (no test failed, or none ran it), {len(other)} other {sorted(set(other.values()))}")
for name in survived:
    print(f"{status[name]}: {name}")
floor = float(sys.argv[2] or 0)
if 100 * killed / max(len(status), 1) < floor:
    sys.exit(f"mutation score below MUTATION_MIN_SCORE {floor:g}%")
PYEOF
echo "mutants and logs: $WORK (mutmut show NAME there prints a mutant's diff)"
