"""Command-line arguments in DeepSpeed-Chat style, with ``--config file.yaml`` whose values the command line
overrides, and the flags every stage shares."""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

import yaml


class ConfigError(ValueError):
    """A config file or flag is invalid; the message names the file or flag and what was expected."""


def _load_yaml(path: str) -> dict:
    try:
        with open(path) as handle:
            values = yaml.safe_load(handle) or {}
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: file not found") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"--config {path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values")
    return values


def parse_args_with_config(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None):
    """Parse ``argv``; values from ``--config`` files (later files win) become defaults, so explicit flags
    override them. Unknown keys in a config file are an error naming the file and the key."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", action="append", default=[])
    known, _ = pre.parse_known_args(argv)
    dests = {action.dest for action in parser._actions}
    for path in known.config:
        values = _load_yaml(path)
        for key in values:
            if key.replace("-", "_") not in dests:
                raise ConfigError(f"--config {path}: unknown key {key!r} (not a flag of this stage)")
        parser.set_defaults(**{key.replace("-", "_"): value for key, value in values.items()})
    args = parser.parse_args(argv)
    return args


def add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model_name_or_path", default="tiny-gemma",
                       help="HF checkpoint dir, hub id, or an offline name: tiny-gemma, smollm2-135m-instruct")
    group.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    group.add_argument("--gradient_checkpointing", action="store_true")
    group.add_argument("--lora_dim", type=int, default=0, help="LoRA rank via peft; 0 trains all weights")
    group.add_argument("--lora_alpha", type=float, default=16.0)
    group.add_argument("--lora_dropout", type=float, default=0.0)


def add_data_args(parser: argparse.ArgumentParser, default_max_len: int = 512) -> None:
    group = parser.add_argument_group("data")
    group.add_argument("--data_name", default="synthetic",
                       help="dataset adapter: synthetic, tldr, hh-rlhf, webgpt, apps, humaneval, jsonl")
    group.add_argument("--data_path", default=None,
                       help="local file in the dataset's schema (required for jsonl; otherwise loads the hub)")
    group.add_argument("--eval_data_path", default=None,
                       help="local file of held-out rows (default: the dataset's validation split, else the "
                            "held-out part of the training rows, see --eval_holdout)")
    group.add_argument("--data_split", default="2,4,4", help="SFT,RM,PPO proportions (paper §B.2)")
    group.add_argument("--data_cache_dir", default=None, help="where the phase split is cached")
    group.add_argument("--max_seq_len", type=int, default=default_max_len)
    group.add_argument("--max_train_samples", type=int, default=0, help="0 = all")
    group.add_argument("--max_eval_samples", type=int, default=0, help="0 = all")
    from .data.options import CHOICES, DataOptions

    defaults = DataOptions()
    group.add_argument("--eval_holdout", default=defaults.eval_holdout,
                       help="train,eval weights holding out the last part of a seeded shuffle for evaluation, for "
                            "a single --data_path file without --eval_data_path and for webgpt, as DeepSpeed-Chat (default: %(default)s)")
    group.add_argument("--webgpt_ties", choices=CHOICES["webgpt_ties"], default=defaults.webgpt_ties,
                       help="equal scores: keep with answer 0 chosen (the authors) or drop (default: %(default)s)")
    group.add_argument("--webgpt_template", choices=CHOICES["webgpt_template"], default=defaults.webgpt_template,
                       help="prompt: dschat = ' Human: {q} Assistant:' (the authors), hh = the HH-RLHF template (default: %(default)s)")
    group.add_argument("--tldr_cnndm", choices=CHOICES["tldr_cnndm"], default=defaults.tldr_cnndm,
                       help="TL;DR validation's CNN/DailyMail rows: keep (the authors) or drop (Reddit only) (default: %(default)s)")


def add_optim_args(parser: argparse.ArgumentParser, lr: float) -> None:
    group = parser.add_argument_group("optimisation")
    group.add_argument("--per_device_train_batch_size", type=int, default=8)
    group.add_argument("--per_device_eval_batch_size", type=int, default=16)
    group.add_argument("--gradient_accumulation_steps", type=int, default=None,
                       help="default: global batch / (micro batch x world size), or 1 without --global_batch_size")
    group.add_argument("--global_batch_size", type=int, default=None,
                       help="Table 5 batch size; sets the accumulation steps for the number of processes")
    group.add_argument("--learning_rate", type=float, default=lr)
    group.add_argument("--weight_decay", type=float, default=0.0)
    group.add_argument("--num_train_epochs", type=int, default=1)
    group.add_argument("--max_steps", type=int, default=0, help="stop after this many optimizer steps (0 = all)")
    group.add_argument("--lr_scheduler_type", choices=["cosine", "linear", "constant_with_warmup"], default="cosine")
    group.add_argument("--warmup_ratio", type=float, default=0.1)
    group.add_argument("--gradient_clipping", type=float, default=1.0)


def add_runtime_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("runtime")
    group.add_argument("--output_dir", required=True)
    group.add_argument("--seed", type=int, default=1234)
    group.add_argument("--zero_stage", type=int, choices=[0, 1, 2, 3], default=0)
    group.add_argument("--offload", action="store_true", help="ZeRO optimizer-state offload to CPU")
    group.add_argument("--offload_params", action="store_true", help="ZeRO-3 parameter offload to CPU")
    group.add_argument("--eval_steps", type=int, default=0, help="evaluate every N optimizer steps (0 = per epoch)")
    group.add_argument("--save_steps", type=int, default=0, help="resumable checkpoint every N steps (0 = none)")
    group.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in output_dir")
    group.add_argument("--log_steps", type=int, default=10)
    group.add_argument("--tensorboard_dir", default=None, help="default: <output_dir>/tensorboard")
    group.add_argument("--no_progress_bar", action="store_true")
    group.add_argument("--local_rank", type=int, default=-1, help="passed by the deepspeed launcher")
    group.add_argument("--config", action="append", default=[], help="YAML file(s) of flag values")


def resolve_accumulation(args, world_size: int) -> None:
    """Set ``args.gradient_accumulation_steps`` from ``--global_batch_size`` when it was not given, so one
    config (Table 5's global batch) serves any number of GPUs."""
    if args.gradient_accumulation_steps is not None:
        return
    if args.global_batch_size is None:
        args.gradient_accumulation_steps = 1
        return
    per_step = args.per_device_train_batch_size * world_size
    if args.global_batch_size % per_step:
        raise ConfigError(f"--global_batch_size {args.global_batch_size} is not a multiple of micro batch "
                          f"{args.per_device_train_batch_size} x {world_size} processes")
    args.gradient_accumulation_steps = args.global_batch_size // per_step
