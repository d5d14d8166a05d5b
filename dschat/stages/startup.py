"""A stage's start-up checks that read files but load no weights, after the cross-flag rules
(:mod:`dschat.stages.resolve`) and before the run creates anything: the parser's installed model, the score
heads the reward model and critic need (their ``config.json``), the configuration a ``--resume`` checkpoint
recorded, and the data — read, tokenised, and enough of it for one batch, with an evaluation prompt that fits.

The run calls these functions in this order before it writes its output folder; the pre-flight (``--dry_run``,
:mod:`dschat.cli.preflight`) calls the same functions, so both refuse in the same words (a ``ValueError``:
``ConfigError``, ``DataError`` or ``ModelLoadError``, one line naming the flag or file)."""
from __future__ import annotations

from typing import Any, Tuple

from dschat.core.config import ConfigError
from dschat.data import PairDataset, PromptDataset, SFTDataset
from dschat.data.stage_data import eval_code_tasks, eval_pairs, eval_prompts, train_code_tasks, train_pairs, train_prompts
from dschat.model.loading import ModelLoadError
from dschat.model.reward_model import score_head_missing
from dschat.rlhf.algorithms import get_algorithm
from dschat.rlhf.environments import environment_tasks, make_environment
from dschat.rlhf.macro_action.parsers import parser_missing
from dschat.rlhf.rollout.turns import prompt_text
from dschat.training.checkpoint import latest_checkpoint, read_manifest
from dschat.training.resume_config import check_resume_config


def check_parser(args: Any) -> None:
    """``--termination parsing``: the parser it resolves to is installed (benepar's model, a spaCy model)."""
    if getattr(args, "termination", None) != "parsing":
        return
    missing = parser_missing(args.termination_options(seed=0, code=args.reward == "code").parser)
    if missing:
        raise ConfigError(missing)


def check_score_heads(args: Any) -> None:
    """Step 3 with ``--reward model``: the reward model, and the critic initialised from a checkpoint, have a
    score head (``config.json`` names a ``*ForSequenceClassification``; ``load_reward_model(require_head=True)``
    checks the weights)."""
    if getattr(args, "reward", None) != "model":
        return
    flags = [("--reward_model_name_or_path", args.reward_model_name_or_path)]
    if get_algorithm(args.algo).needs_critic:
        flags.insert(0, ("--critic_model_name_or_path", args.critic_model_name_or_path))
    for flag, name in flags:
        missing = score_head_missing(name, flag)
        if missing:
            raise ModelLoadError(missing)  # the load's own error class (load_reward_model checks the weights)


def check_resume(args: Any) -> None:
    """``--resume``: the newest complete checkpoint's recorded configuration against these resolved flags (the
    training loop's own comparison, :func:`~dschat.training.resume_config.check_resume_config`)."""
    path = latest_checkpoint(args.output_dir) if args.resume else None
    if path is not None:
        check_resume_config(read_manifest(path).get("config"), args, args.allow_config_change, path)


def check_files(args: Any) -> None:
    """The checks above that need no tokenizer, in the run's order."""
    check_parser(args)
    check_score_heads(args)
    check_resume(args)


def prompt_texts(args: Any, tokenizer) -> Tuple[list, list, Any, Any]:
    """Step 3's ``(training prompts, evaluation prompts, training tasks, evaluation tasks)`` as texts; the tasks are
    the environment's (``--env``), the code tasks (``--reward code``) or the reference solutions (``--reward
    verifier``), each parallel to its prompts, and None when a reward model scores the responses."""
    if args.env is not None:
        return environment_prompts(args, tokenizer)
    if args.reward == "code":
        train_tasks, eval_tasks = train_code_tasks(args), eval_code_tasks(args)
        return [t.prompt for t in train_tasks], [t.prompt for t in eval_tasks], train_tasks, eval_tasks
    if args.reward == "verifier":  # each prompt's reference solution, which the answer verifier checks against
        train, held_out = train_pairs(args, phase=2), eval_pairs(args)
        return ([p.prompt for p in train], [p.prompt for p in held_out], [p.chosen for p in train],
                [p.chosen for p in held_out])
    return train_prompts(args), eval_prompts(args), None, None


def prompt_sets(args: Any, tokenizer, world_size: int) -> Tuple[PromptDataset, PromptDataset, Any, Any]:
    """:func:`prompt_texts`, the prompts tokenised. Refused when no evaluation prompt fits ``--max_prompt_seq_len``
    (too few training prompts: :func:`dschat.training.loop.training_steps`)."""
    train_texts, eval_texts, train_tasks, eval_tasks = prompt_texts(args, tokenizer)
    prompt_set = PromptDataset(train_texts, tokenizer, args.max_prompt_seq_len)
    eval_set = PromptDataset(eval_texts, tokenizer, args.max_prompt_seq_len)
    if len(eval_set) == 0:
        raise ConfigError(f"no evaluation prompt fits --max_prompt_seq_len {args.max_prompt_seq_len} "
                          f"({len(eval_texts)} prompts, {eval_set.num_skipped} too long)")
    return prompt_set, eval_set, train_tasks, eval_tasks


def environment_prompts(args: Any, tokenizer) -> tuple:
    """``(train prompts, eval prompts, train tasks, eval tasks)`` of ``--env``: each task's first observation
    as its episode's prompt text (dschat/rlhf/rollout/turns.py)."""
    tasks = [environment_tasks(args.env, split, limit)
             for split, limit in (("train", args.max_train_samples), ("eval", args.max_eval_samples))]
    return (*[[prompt_text(tokenizer, first_observation(args.env, task)) for task in split] for split in tasks],
            *tasks)


def first_observation(environment: str, task: str) -> str:
    """``reset(task)``'s observation; a one-line error naming the task when the environment cannot start it."""
    try:
        return make_environment(environment).reset(task)[0]
    except Exception as error:
        raise ConfigError(f"--env {environment}: reset({task!r}) raised {error!r}") from None


SUPERVISED_DATA = {"sft": (0, SFTDataset), "rm": (1, PairDataset), "dpo": (1, PairDataset)}
"""Steps 1-2's ``(phase of the --data_split partition, tokenised dataset)``: SFT reads phase 0's sequences, the
reward model and DPO phase 1's pairs (paper §B.2)."""


def pair_sets(args: Any, tokenizer, stage: str) -> tuple:
    """Steps 1-2's ``(training set, evaluation set)`` of ``stage`` (:data:`SUPERVISED_DATA`), tokenised (too
    few examples: :func:`dschat.training.loop.training_steps`)."""
    phase, dataset_cls = SUPERVISED_DATA[stage]
    train_set = dataset_cls(train_pairs(args, phase=phase), tokenizer, args.max_seq_len)
    eval_set = dataset_cls(eval_pairs(args), tokenizer, args.max_seq_len)
    return train_set, eval_set

