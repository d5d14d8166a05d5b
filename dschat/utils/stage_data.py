"""What each stage reads: its phase of the ``--data_split`` partition (paper §B.2) and the held-out split."""
from __future__ import annotations

import logging

from .data import code_tasks_for_phase, load_code_tasks, load_pairs, pairs_for_phase

logger = logging.getLogger(__name__)

PHASES = {0: "SFT", 1: "RM", 2: "PPO"}


def _limit(records: list, limit: int, what: str) -> list:
    if limit and len(records) > limit:
        logger.info("using %d of %d %s (--max_*_samples)", limit, len(records), what)
        return records[:limit]
    return records


def train_pairs(args, phase: int) -> list:
    """The training pairs of ``phase`` (0 SFT, 1 RM, 2 PPO) from the train split."""
    pairs = pairs_for_phase(args.data_name, phase=phase, data_split=args.data_split, split="train",
                            data_path=args.data_path, seed=args.seed, cache_dir=args.data_cache_dir)
    return _limit(pairs, args.max_train_samples, f"{PHASES[phase]} training pairs")


def eval_pairs(args) -> list:
    """The held-out pairs (the dataset's validation/test split)."""
    pairs = load_pairs(args.data_name, split="validation", data_path=getattr(args, "eval_data_path", None)
                       or args.data_path)
    return _limit(pairs, args.max_eval_samples, "evaluation pairs")


def train_code_tasks(args) -> list:
    """PPO's code tasks (paper §B.2: 80% of APPS with ``--data_split 2,0,8``). HumanEval has only a test split,
    which then serves as training and held-out set alike (a smoke-test setting, not a benchmark)."""
    if args.data_name == "humaneval":
        return _limit(load_code_tasks("humaneval", split="test"), args.max_train_samples, "code tasks")
    tasks = code_tasks_for_phase(args.data_name, phase=2, data_split=args.data_split, split="train",
                                 data_path=args.data_path, seed=args.seed, cache_dir=args.data_cache_dir)
    return _limit(tasks, args.max_train_samples, "PPO code tasks")


def eval_code_tasks(args) -> list:
    split = "test" if args.data_name == "humaneval" else "validation"
    tasks = load_code_tasks(args.data_name, split=split, data_path=args.eval_data_path or args.data_path)
    return _limit(tasks, args.max_eval_samples, "evaluation code tasks")


def train_prompts(args) -> list:
    return [pair.prompt for pair in train_pairs(args, phase=2)]


def eval_prompts(args) -> list:
    return [pair.prompt for pair in eval_pairs(args)]
