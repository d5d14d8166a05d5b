"""Print the values a stage runs with for a config (defaults, then its ``inherit:`` layers, then the file):

    python -m dschat.cli.show_config ppo configs/ppo/gemma-2b/tldr.yaml temperature max_new_tokens

Without keys, every flag is printed as ``key: value``; with keys, one value per line (for shell scripts)."""
from __future__ import annotations


from dschat.cli import stage_parser
from dschat.stages.configs import STAGE_CONFIGS
from dschat.utils.cli import ArgumentParser, run_cli
from dschat.utils.config import ConfigError, load_config


def resolved_config(stage: str, path: str) -> dict:
    """``{flag: value}`` of ``stage`` run with ``--config path`` and no other flags."""
    parser = stage_parser(stage)
    return {**{name: spec.default for name, spec in parser.specs.items()}, **load_config(path, parser.specs)}


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("stage", choices=sorted(STAGE_CONFIGS))
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("keys", nargs="*", help="flags to print (default: all)")
    args = parser.parse_args(argv)
    values = resolved_config(args.stage, args.config)
    unknown = [key for key in args.keys if key not in values]
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not a flag of stage {args.stage}")
    for key in args.keys or values:
        print(values[key] if args.keys else f"{key}: {values[key]}")


if __name__ == "__main__":
    run_cli(main)
