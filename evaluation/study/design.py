"""The study's design as data: its tasks (the flags of their SFT, reward-model and PPO runs), its arms (each arm's
step-3 flags), the groups of arms each part of the study runs and the report compares, and the constants fixed
before the deciding runs (the equivalence margins). It imports nothing of the study: every other module of
:mod:`evaluation.study` reads it, and a new arm or task is a line here."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Tuple


EVAL_SEED = 4321


MINI_BATCHES = ("--per_device_train_batch_size", "8", "--ppo_mini_batch_size", "8")
"""The mini-batch arm's update: 8-row optimizer steps (2 per rollout on the long task's 16 rows, 4 on the short
task's 32) instead of one step per rollout."""


@dataclass(frozen=True)
class Task:
    """One embedded task: how its shared SFT and reward models are trained (with ``--seed model_seed``), and its
    PPO flags."""

    name: str
    sft: Tuple[str, ...]
    rm: Tuple[str, ...]
    ppo: Tuple[str, ...]
    model_seed: int = 1234


COMMON = ("--log_steps", "25", "--no_progress_bar")


PPO_COMMON = ("--logprobs_at_unit_temperature", "--lr_scheduler_type", "constant_with_warmup")
"""Every run's log-probs from the raw logits (the released code's setting), and a constant learning rate after
the warmup: a decaying schedule would flatten every curve where it reaches 0, whatever the method. It also makes
a run's first steps independent of its length, which ``verify`` relies on."""


TASKS = {
    # the short task: scripts/demo_flags.sh's flags (the fast demo), eval on 128 prompts with a fixed seed
    "short": Task(
        "synthetic",
        sft=("--data_name", "synthetic", "--num_train_epochs", "6", "--per_device_train_batch_size", "16",
             "--learning_rate", "2e-3", "--warmup_ratio", "0.05", "--max_seq_len", "64", *COMMON),
        rm=("--data_name", "synthetic", "--num_train_epochs", "2", "--per_device_train_batch_size", "16",
            "--learning_rate", "5e-4", "--warmup_ratio", "0.05", "--max_seq_len", "64", *COMMON),
        ppo=("--data_name", "synthetic", "--max_prompt_seq_len", "32", "--max_new_tokens", "24",
             "--per_device_generation_batch_size", "32", "--per_device_train_batch_size", "16",
             "--actor_learning_rate", "2e-4", "--critic_learning_rate", "5e-4", "--warmup_steps", "5",
             "--kl_coef", "0.05", "--max_steps", "60", "--eval_steps", "10", "--max_eval_samples", "128",
             "--per_device_eval_batch_size", "64", "--log_steps", "10", "--log_samples", "0",
             "--no_progress_bar", *PPO_COMMON)),
    # the long task: 100-130-token responses; 40/50/10 split (PPO needs prompts only)
    "long": Task(
        "synthetic-long",
        sft=("--data_name", "synthetic-long", "--data_split", "4,5,1", "--num_train_epochs", "8",
             "--per_device_train_batch_size", "16", "--learning_rate", "2e-3", "--warmup_ratio", "0.05",
             "--max_seq_len", "160", *COMMON),
        rm=("--data_name", "synthetic-long", "--data_split", "4,5,1", "--num_train_epochs", "3",
            "--per_device_train_batch_size", "16", "--learning_rate", "5e-4", "--warmup_ratio", "0.05",
            "--max_seq_len", "160", *COMMON),
        ppo=("--data_name", "synthetic-long", "--data_split", "4,5,1", "--num_train_epochs", "100",
             "--max_prompt_seq_len", "32", "--max_new_tokens", "136", "--per_device_generation_batch_size", "16",
             "--per_device_train_batch_size", "16", "--actor_learning_rate", "2e-4", "--critic_learning_rate",
             "5e-4", "--warmup_steps", "5", "--kl_coef", "0.05", "--max_steps", "48", "--eval_steps", "4",
             "--max_eval_samples", "128", "--per_device_eval_batch_size", "64", "--log_steps", "4",
             "--log_samples", "0", "--no_progress_bar", *PPO_COMMON)),
}


MODEL_SEED_TASKS = {"long-sftrm2": ("long", 2), "long-sftrm3": ("long", 3), "long-sftrm4": ("long", 4),
                    "long-sftrm5": ("long", 5), "long-sftrm6": ("long", 6)}
"""Task -> (the task it repeats, its SFT + RM seed): the long task with its SFT and reward model trained again from
another seed (the base model's initialisation, the SFT / RM / PPO partition of the training rows and their order;
the held-out prompts and the gold score are the task's own). Only the pairs of :data:`MODEL_SEED_PAIRS` run on
them, on the confirmation's fresh PPO seeds."""


TASKS.update({name: replace(TASKS[base], model_seed=seed) for name, (base, seed) in MODEL_SEED_TASKS.items()})


ARMS: Dict[str, Tuple[str, ...]] = {
    "ppo": ("--termination", "fixed", "--ngram", "1"),
    "mappo": ("--termination", "fixed", "--ngram", "5"),
    "mappo-entropy": ("--termination", "entropy", "--entropy_quantile", "0.2"),
    "ppo-lam0.98": ("--termination", "fixed", "--ngram", "1", "--lam", "0.98"),
    "ppo-lam0.99": ("--termination", "fixed", "--ngram", "1", "--lam", "0.99"),
    "ppo-lam1": ("--termination", "fixed", "--ngram", "1", "--lam", "1.0"),
    "mappo-n3": ("--termination", "fixed", "--ngram", "3"),
    "mappo-n10": ("--termination", "fixed", "--ngram", "10"),
    "mappo-ninf": ("--termination", "fixed", "--ngram", "inf"),
    "mappo-lam0.99": ("--termination", "fixed", "--ngram", "5", "--lam", "0.99"),
    "mappo-lam1": ("--termination", "fixed", "--ngram", "5", "--lam", "1.0"),
    "mappo-entropy-lam0.99": ("--termination", "entropy", "--entropy_quantile", "0.2", "--lam", "0.99"),
    "mappo-entropy-lam1": ("--termination", "entropy", "--entropy_quantile", "0.2", "--lam", "1.0"),
    "mappo-randomized": ("--termination", "randomized"),
    "mappo-parsing": ("--termination", "parsing", "--parser", "spacy"),
    "mappo-ppl": ("--termination", "ppl"),
    "ppo-minibatch": ("--termination", "fixed", "--ngram", "1", *MINI_BATCHES),
    "mappo-minibatch": ("--termination", "fixed", "--ngram", "5", *MINI_BATCHES),
}
"""Arm name -> its step-3 flags (on top of the task's); λ = 0.95 (Table 5) unless the name says otherwise."""


CORE_ARMS = {"short": ("ppo", "mappo", "mappo-entropy"), "long": ("ppo", "mappo", "mappo-entropy", "ppo-lam1")}
"""Per task, the arms every README sentence rests on, trained seed-major with ``--seeds`` seeds."""


SWEEP_ARMS = {"long": ("ppo-lam0.99", "ppo-lam0.98", "mappo-n10", "mappo-ninf", "mappo-n3")}
"""Token PPO's λ sweep beside MA-PPO's n sweep (the long task), ``--seeds`` seeds each, arm-major."""


MAPPO_LAMBDA_ARMS = {"long": ("mappo-lam0.99", "mappo-lam1", "mappo-entropy-lam0.99", "mappo-entropy-lam1")}
"""MA-PPO's own λ sweep (n = 5 and the entropy rule at λ ∈ {0.99, 1}): the arms that decide whether the macro adds
anything beyond λ. They run in the confirmation (:data:`CONFIRMATION_TIERS`), not on the exploration seeds."""


CONFIRMATION_TIERS = {"long": (("ppo-lam1", "mappo-lam1"),
                               ("mappo-lam0.99", "ppo-lam0.99", "mappo", "mappo-entropy-lam1",
                                "mappo-entropy-lam0.99"))}
"""The confirmation: fresh seeds (``--seeds`` + 1 ... 2 × ``--seeds``: 9-16) for token PPO at the λ the exploration
seeds (1-8) found best for it (λ = 1) against MA-PPO n = 5 at the same λ (where neither discounts the reward along
the response: what is left between them is the macro), with the equivalence margin
(:data:`evaluation.study.stats.EQUIVALENCE_MARGINS`) fixed before they ran; then MA-PPO n = 5 at 0.99 and 0.95,
token PPO at 0.99 and the entropy rule at 1 and 0.99. Tier by tier, seed-major within a tier (every arm of the tier
at seed 9, then 10, ...): a budget cut leaves paired seeds, and the first tier whole first."""


MODEL_SEED_PAIRS = {"long": (CONFIRMATION_TIERS["long"][0], ("ppo", "mappo"))}
"""Per task, the (token PPO, MA-PPO) pairs trained again on its further SFT + RM seeds (:data:`MODEL_SEED_TASKS`),
in this order: the confirmation's planned pair (λ = 1), then the paper's (λ = 0.95, Table 5). The task's own
SFT + RM seed has them already: the first on the fresh seeds, the second on the exploration seeds."""


CONFIRMATION_FLAGS = ("--eval_steps", "12")
"""The confirmation evaluates every 12 iterations instead of 4 (an evaluation costs about as much as eight training
rollouts of the long task). Evaluations are seeded and restore every random generator afterwards
(:func:`dschat.core.seeding.seeded_rng`), so training, and the evaluations at 12, 24, 36 and 48, are those of the
same run evaluated every 4 iterations."""


LAMBDA_SWEEP = ("ppo", "ppo-lam0.98", "ppo-lam0.99", "ppo-lam1")


MAPPO_LAMBDAS = {"mappo": ("mappo", "mappo-lam0.99", "mappo-lam1"),
                 "mappo-entropy": ("mappo-entropy", "mappo-entropy-lam0.99", "mappo-entropy-lam1")}
"""Each MA-PPO rule's arms at λ = 0.95, 0.99, 1."""


N_SWEEP = ("ppo", "mappo-n3", "mappo", "mappo-n10", "mappo-ninf")


ABLATION_ARMS = ("mappo-randomized", "mappo-parsing", "mappo-ppl", "ppo-minibatch", "mappo-minibatch")
"""Further ablations, ``--ablation_seeds`` seeds each, arm-major, after everything above."""


MINI_BATCH_ARMS = ("ppo-minibatch", "mappo-minibatch")


VERIFY_RUNS = ("long/ppo/1", "long/mappo-lam1/9", "long-sftrm2/mappo-lam1/9")
"""``verify``'s default: the first run of the exploration, the confirmation's first MA-PPO run (the same task's
SFT and reward models, so it costs only its first PPO steps) and that run on the second SFT + RM seed (its own
SFT and reward model, trained again)."""


def model_seed_tasks(base: str) -> List[str]:
    """The tasks that repeat ``base`` from further SFT + RM seeds (:data:`MODEL_SEED_TASKS`)."""
    return [task for task, (repeated, _) in MODEL_SEED_TASKS.items() if repeated == base]


def confirmation_seeds(seeds: int) -> range:
    """The confirmation's seeds: the ``seeds`` after the exploration's 1 ... ``seeds``."""
    return range(seeds + 1, 2 * seeds + 1)


EQUIVALENCE_MARGINS = {"gold": 0.010, "rm": 0.067}
"""The equivalence margin Δ per metric, fixed before round 3's MA-PPO λ arms were run (round 1 had run MA-PPO and token
PPO at λ = 1 on 5 seeds per task under an older protocol, before it): one third of what tuning token PPO's
λ alone bought on the long task in the round-2 runs (PPO at λ = 1 − PPO at λ = 0.95, final score, seed mean over
seeds 1-8: gold +0.0305, RM +0.2001; ``tests/test_study_inference.py`` recomputes it from the committed runs). Two
arms whose paired difference lies inside ±Δ (two one-sided tests at 5%) differ by less than a third of the gain the
baseline gets from its own λ: "no difference worth the name" on this task. Gold is the primary metric (the task's
ground truth; the reward model is the proxy a policy can exploit)."""


MARGIN_RULE = ("one third of token PPO's λ = 0.95 → 1 gain (round-2 runs, seeds 1-8: gold +0.0305, RM +0.2001), "
               "fixed before round 3's runs (round 1 had run both methods at λ = 1: report, \"Order of decisions\")")


VARIATION_COVERED = ("Every interval but the SFT + RM seeds' covers the PPO seed only (rollout sampling, value-head "
                     "initialisation, optimizer noise): one SFT model and one reward model (seed 1234) are shared by "
                     "every other run. Every evaluation samples 128 responses to 32 distinct held-out prompts with "
                     "one sampling seed (`--eval_seed 4321`): each run's score is one draw, so the sampling noise is "
                     "inside the spread over PPO seeds, but the prompts are fixed and the two arms of a pair share the "
                     "seed (the final actors drawn again under other sampling seeds measure both).")


METRICS = {"rm": "eval/score", "gold": "eval/gold"}


TASK_TITLES = {"short": "short task (synthetic, ~16 tokens)", "long": "long task (synthetic-long, ~115 tokens)"}


README_ARMS = {"short": ("ppo", "mappo", "mappo-entropy"),
               "long": ("ppo", "ppo-lam0.98", "ppo-lam0.99", "ppo-lam1", "mappo", "mappo-lam0.99", "mappo-lam1",
                        "mappo-entropy", "mappo-entropy-lam0.99", "mappo-entropy-lam1", "mappo-n3", "mappo-n10",
                        "mappo-ninf")}
"""The rows of the README's study table (arms with the core seed count); their tests are the family
"exploration against PPO" of :func:`evaluation.study.decisions.comparison_families`."""
