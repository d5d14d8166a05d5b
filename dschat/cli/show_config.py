"""Print the values a stage runs with for a config (defaults, then its ``inherit:`` layers, then the file, then
any stage flags given after ``--``), each with the layer that set it:

    python -m dschat.cli.show_config ppo configs/ppo/gemma-2b/tldr.yaml temperature max_new_tokens
    python -m dschat.cli.show_config ppo configs/ppo/gemma-2b/tldr.yaml -- --warmup_ratio 0.05

Without keys, every flag is printed as ``key: value  [layer]`` (``default``, the YAML file, or ``flag``), then
which of --warmup_steps / --warmup_ratio sets the warmup; with keys, one value per line (for shell scripts)."""
from __future__ import annotations

import sys
from typing import Any, Dict, Sequence, Tuple

from dschat.cli import stage_parser
from dschat.stages.configs import STAGE_CONFIGS
from dschat.core.entrypoint import ArgumentParser, run_cli
from dschat.core.config import EXPLICIT_FLAGS, ConfigError, check_layer, config_layers

FLAG_LAYER = "flag"
DEFAULT_LAYER = "default"


def layered_config(stage: str, path: str, flags: Sequence[str] = ()) -> Dict[str, Tuple[Any, str]]:
    """``{flag: (value, layer)}`` of ``stage`` run with ``--config path`` and ``flags``: the layer is
    ``default``, the YAML file (of the ``inherit:`` chain) that set the value last, or ``flag``."""
    parser = stage_parser(stage)
    layers = {name: DEFAULT_LAYER for name in parser.specs}
    for layer_path, raw in config_layers(path):
        layers.update({name: layer_path for name in check_layer(layer_path, raw, parser.specs)})
    argv = ["--config", path, *flags]
    if "--output_dir" not in flags:
        argv += ["--output_dir", "<output_dir>"]
    args = parser.parse_config(argv)
    given = getattr(args, EXPLICIT_FLAGS, frozenset())
    values = {name: (getattr(args, name), FLAG_LAYER if name in given else layers[name]) for name in parser.specs}
    if "--output_dir" not in flags:
        values["output_dir"] = (None, "required flag, not given")
    return values


def resolved_config(stage: str, path: str) -> dict:
    """``{flag: value}`` of ``stage`` run with ``--config path`` and no other flags."""
    return {name: value for name, (value, _) in layered_config(stage, path).items()}


def warmup_line(values: Dict[str, Tuple[Any, str]]) -> str:
    """Which of --warmup_steps / --warmup_ratio sets the warmup (steps win when set: ``ScheduleArgs.warmup``)."""
    (steps, steps_layer), (ratio, ratio_layer) = values["warmup_steps"], values["warmup_ratio"]
    if steps is not None:
        return (f"warmup: --warmup_steps {steps} [{steps_layer}] wins; --warmup_ratio {ratio} [{ratio_layer}] is "
                "not used")
    return f"warmup: --warmup_ratio {ratio} [{ratio_layer}] of the optimizer steps (--warmup_steps not set)"


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("stage", choices=sorted(STAGE_CONFIGS))
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("keys", nargs="*", help="flags to print (default: all)")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    values = layered_config(args.stage, args.config, argv[split + 1:])
    unknown = [key for key in args.keys if key not in values]
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not a flag of stage {args.stage}")
    for key in args.keys:
        print(values[key][0])
    if args.keys:
        return
    for key, (value, layer) in values.items():
        print(f"{key}: {value}  [{layer}]")
    if "warmup_steps" in values:
        print(warmup_line(values))


if __name__ == "__main__":
    run_cli(main)
