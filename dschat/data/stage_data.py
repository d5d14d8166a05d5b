"""What each stage reads: its phase of the ``--data_split`` partition (paper §B.2) and the held-out split.

Evaluation rows come from ``--eval_data_path`` when given, else from the dataset's evaluation split, else
(a single ``--data_path`` file, or WebGPT) from the held-out last 5% of the training rows; training then
reads only the rest (:mod:`dschat.data.records`). ``args`` may be any namespace with the data flags;
missing processing flags keep their defaults (:class:`dschat.data.options.DataOptions`).
"""
from __future__ import annotations

import logging

from dschat.data import code_tasks_for_phase, load_code_tasks, load_pairs, pairs_for_phase
from .loading import tasks_with_tests
from .options import DataOptions

logger = logging.getLogger(__name__)

PHASES = {0: "SFT", 1: "RM", 2: "PPO"}


def _limit(records: list, limit: int, what: str) -> list:
    if limit and len(records) > limit:
        logger.info("using %d of %d %s (--max_*_samples)", limit, len(records), what)
        return records[:limit]
    return records


def _sources(args) -> dict:
    return {"data_path": getattr(args, "data_path", None), "eval_data_path": getattr(args, "eval_data_path", None),
            "options": DataOptions.from_args(args)}


def train_pairs(args, phase: int) -> list:
    """The training pairs of ``phase`` (0 SFT, 1 RM, 2 PPO) from the train split."""
    pairs = pairs_for_phase(args.data_name, phase=phase, data_split=args.data_split, split="train",
                            seed=args.seed, cache_dir=args.data_cache_dir, **_sources(args))
    return _limit(pairs, args.max_train_samples, f"{PHASES[phase]} training pairs")


def eval_pairs(args) -> list:
    """The held-out pairs (the dataset's validation/test split, or the held-out part of its training rows)."""
    pairs = load_pairs(args.data_name, split="validation", **_sources(args))
    return _limit(pairs, args.max_eval_samples, "evaluation pairs")


def train_code_tasks(args) -> list:
    """PPO's code tasks (paper §B.2: 80% of APPS with ``--data_split 2,0,8``), those with test cases.
    HumanEval has only a test split, which then serves as training and held-out set alike (a smoke-test
    setting, not a benchmark)."""
    if args.data_name == "humaneval":
        logger.warning("training on HumanEval's test split, the evaluation set every pass@k is measured on "
                       "(--allow_eval_set_training): a smoke test, not a result")
        return _limit(load_code_tasks("humaneval", split="test"), args.max_train_samples, "code tasks")
    tasks = code_tasks_for_phase(args.data_name, phase=2, data_split=args.data_split, split="train",
                                 seed=args.seed, cache_dir=args.data_cache_dir, **_sources(args))
    return _limit(tasks_with_tests(tasks, f"{args.data_name} PPO code tasks"), args.max_train_samples,
                  "PPO code tasks")


def eval_code_tasks(args) -> list:
    split = "test" if args.data_name == "humaneval" else "validation"
    tasks = load_code_tasks(args.data_name, split=split, **_sources(args))
    return _limit(tasks_with_tests(tasks, f"{args.data_name} evaluation code tasks"), args.max_eval_samples,
                  "evaluation code tasks")


def train_prompts(args) -> list:
    return [pair.prompt for pair in train_pairs(args, phase=2)]


def eval_prompts(args) -> list:
    return [pair.prompt for pair in eval_pairs(args)]
