"""Every refusal a run can reach at start-up, one table: each ``raise`` (or refusing ``return``) of the functions
the stages call before they create their output folder has a case here (or a reason it has none, with the test
that covers it), found by reading the sources, so a new refusal the table lacks fails
``test_every_startup_refusal_has_a_case``; and every call the stages make before their folder is accounted for
(``test_the_runs_start_up_calls_only_what_the_table_covers``), so a new start-up check is too.

Each case runs twice, in-process: the pre-flight (``--dry_run``) must list the run's refusal in the run's words
(a MISSING line), exit 2 and create nothing; the run itself (its process group stubbed, nothing else) must stop
on that refusal and leave no folder behind. The cross-flag rules have their own table (tests/test_resolve.py)."""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import textwrap
import types
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import pytest

from dschat.core.entrypoint import run_cli

REWARD = ("--reward_model_name_or_path", "tiny-gemma")

START_UP = {
    "dschat.stages.startup": ("check_parser", "check_score_heads", "check_resume", "prompt_sets", "pair_sets"),
    "dschat.rlhf.macro_action.parsers": ("parser_missing", "resolve_parser_name"),
    "dschat.rlhf.macro_action.parsers.benepar_tree": ("benepar_missing",),
    "dschat.rlhf.macro_action.parsers.spacy_tree": ("spacy_model_missing",),
    "dschat.model.reward_model": ("score_head_missing",),
    "dschat.training.resume_config": ("check_resume_config",),
    "dschat.training.loop": ("training_steps",),
    "dschat.data.loading": ("load_pairs", "load_code_tasks"),
    "dschat.data.tokenized": ("PairDataset.__init__",),
    "dschat.training.output_dir": ("require_writable", "require_checkpoint_space"),
}
"""The functions whose refusals the stages reach before their folder exists (besides the resolver's rules)."""

COVERED_ELSEWHERE = {
    ("resolve_parser_name", "--parser "): "--parser's choices refuse an unknown name at parse time",
    ("require_writable", "--output_dir "): "tests/test_faults_disk.py::test_read_only_output_dir_is_one_line_before_any_work",
    ("require_checkpoint_space", "--output_dir "): "tests/test_faults_disk.py::test_too_little_space_for_one_checkpoint_"
                                                   "is_one_line_before_training; the pre-flight's disk line: "
                                                   "tests/test_preflight.py::test_disk_line_needs_one_checkpoint_of_"
                                                   "the_trained_models",
}
"""Refusals that no case below reaches, and where they are tested instead."""

NO_REFUSAL_OF_ITS_OWN = {
    "require_writable", "init_distributed", "resolve", "check_files", "set_random_seed", "load_tokenizer",
    "prompt_sets", "pair_sets", "training_steps", "RLHFEngine", "producer_placement_error", "ConfigError",
    "require_checkpoint_space", "check_rollout_engine", "engine_config", "prepare_model", "load_model",
    "init_train_engine", "collator_cls.for_tokenizer", "Stage", "shard_loader", "objective", "len",
    "os.environ.get", "engines.actor.device.type",
}
"""What ``ppo.run`` and ``run_supervised`` call before their folder: the tabled functions, the resolver
(tests/test_resolve.py), and what refuses nothing the pre-flight does not check first — the models are checked
by its model lines (tests/test_preflight.py), the rollout engine and producer placement by its engine line
(tests/test_async_placement.py); building the engines loads weights, which a pre-flight does not."""


def refusal_sites() -> set:
    """``{(function, the message's first literal words)}`` of every ``raise X("...")`` and every string
    ``return``-ed as a refusal in :data:`START_UP` (a re-raise of a returned line, ``raise X(name)``, is the
    ``return``'s site)."""
    sites = set()
    for module_name, functions in START_UP.items():
        module = importlib.import_module(module_name)
        for qualified in functions:
            target = module
            for part in qualified.split("."):
                target = getattr(target, part)
            tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
            for node in ast.walk(tree):
                value = None
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                    value = node.exc.args[0]
                elif isinstance(node, ast.Return) and isinstance(node.value, (ast.JoinedStr, ast.Constant)):
                    value = node.value
                words = first_words(value)
                if words:
                    sites.add((qualified.split(".")[-1] if "." not in qualified else qualified, words))
    return sites


def first_words(node) -> Optional[str]:
    """The first literal piece of a string or f-string node (None for a name or a non-string constant)."""
    if isinstance(node, ast.BinOp):  # "..." + ... or ( "..." f"..." ) joined
        return first_words(node.left)
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) and node.value else None
    if isinstance(node, ast.JoinedStr):
        pieces = [part.value for part in node.values if isinstance(part, ast.Constant) and part.value.strip(" :")]
        return pieces[0] if pieces else None
    return None


# ---------------------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    site: Tuple[str, str]
    stage: str
    flags: Tuple[str, ...]
    setup: Optional[Callable] = None  # (tmp_path, monkeypatch, out) -> extra flags


def without_benepar_model(tmp_path, monkeypatch, out):
    from dschat.rlhf.macro_action.parsers import benepar_tree

    monkeypatch.setattr(benepar_tree, "benepar_model_installed", lambda model=benepar_tree.BENEPAR_MODEL: False)
    return ()


def without_benepar_package(tmp_path, monkeypatch, out):
    from dschat.rlhf.macro_action.parsers import benepar_tree

    real = benepar_tree.importlib.util.find_spec
    fake = types.SimpleNamespace(util=types.SimpleNamespace(
        find_spec=lambda name, *rest: None if name == "benepar" else real(name, *rest)))
    monkeypatch.setattr(benepar_tree, "importlib", fake)
    return ()


def without_spacy_model(tmp_path, monkeypatch, out):
    import spacy

    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)
    return ()


def causal_lm_critic(tmp_path, monkeypatch, out):
    """A folder of a causal LM (its config.json's architecture and a weights file; no weights are read)."""
    from transformers import GemmaConfig

    config = GemmaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=32)
    config.architectures = ["GemmaForCausalLM"]
    config.save_pretrained(tmp_path / "lm")
    (tmp_path / "lm" / "model.safetensors").write_bytes(b"")
    return ("--critic_model_name_or_path", str(tmp_path / "lm"))


def checkpoint_with_another_learning_rate(tmp_path, monkeypatch, out):
    """A complete checkpoint (its manifest) recorded by a run whose actor learning rate was 1e-6."""
    from dschat.cli.ppo import build_parser
    from dschat.stages.resolve import resolve
    from dschat.training.resume_config import config_record

    saved = resolve("ppo", build_parser().parse_config(["--output_dir", str(out), *REWARD, "--resume",
                                                         "--actor_learning_rate", "1e-6"]), 1)
    step = out / "checkpoints" / "step2"
    step.mkdir(parents=True)
    (step / "complete.json").write_text(json.dumps({"step": 2, "engines": ["actor", "critic"],
                                                    "config": config_record(saved)}))
    return ("--resume",)


def rows(tmp_path, name: str, *lines: dict) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def jsonl_without_rejected(tmp_path, monkeypatch, out):
    return ("--data_name", "jsonl", "--data_path", rows(tmp_path, "pairs.jsonl",
                                                        *[{"prompt": f"Q{i}:", "chosen": " a"} for i in range(40)]))


CASES = [
    Case(("benepar_missing", "--parser benepar: benepar's model "), "ppo", REWARD + ("--termination", "parsing",
                                                                                   "--parser", "benepar"),
         without_benepar_model),
    Case(("benepar_missing", "--parser benepar: the benepar package is not installed (pip install benepar); or use "
                            "--parser spacy"), "ppo", REWARD + ("--termination", "parsing", "--parser", "benepar"),
         without_benepar_package),
    Case(("spacy_model_missing", "--parser: no spaCy English model installed (tried "), "ppo",
         REWARD + ("--termination", "parsing", "--parser", "spacy"), without_spacy_model),
    Case(("score_head_missing", ": the checkpoint has no score head (config.json's architectures: "), "ppo", REWARD,
         causal_lm_critic),
    Case(("check_resume_config", "--resume: checkpoint "), "ppo", REWARD, checkpoint_with_another_learning_rate),
    Case(("prompt_sets", "no evaluation prompt fits --max_prompt_seq_len "), "ppo",
         REWARD + ("--max_prompt_seq_len", "2")),
    Case(("training_steps", " training examples are fewer than one batch ("), "ppo",
         REWARD + ("--per_device_generation_batch_size", "5000")),
    Case(("training_steps", " training examples are fewer than one batch ("), "sft",
         ("--max_train_samples", "3", "--per_device_train_batch_size", "4")),
    Case(("training_steps", " epoch(s) of "), "sft",
         ("--max_train_samples", "4", "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "5")),
    Case(("load_code_tasks", "dataset "), "ppo", REWARD + ("--reward", "code")),
    Case(("load_pairs", "dataset "), "rm", ("--data_name", "humaneval")),
    Case(("PairDataset.__init__", ": no 'rejected' response (the reward model and DPO train on pairs: each row "
                                  "needs \"rejected\")"), "rm", (), jsonl_without_rejected),
]


def case_id(case: Case) -> str:
    return f"{case.stage}-{case.site[0]}-{case.setup.__name__ if case.setup else '_'.join(case.flags[-2:]).strip('-')}"


def test_every_startup_refusal_has_a_case():
    """The table's sites are exactly the refusals in the start-up functions' sources (a new ``raise`` there,
    or a changed message, fails here until it has a case)."""
    tabled = {case.site for case in CASES} | set(COVERED_ELSEWHERE)
    assert refusal_sites() == tabled


def test_the_runs_start_up_calls_only_what_the_table_covers():
    """Every call of ``ppo.run`` and ``run_supervised`` before ``os.makedirs(args.output_dir)`` is a tabled
    function or one listed in :data:`NO_REFUSAL_OF_ITS_OWN` (a new start-up check must join the table), and every
    start-up check is among them (the folder comes after)."""
    from dschat.stages import ppo, supervised

    for function in (ppo.run, supervised.run_supervised):
        body = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0].body
        end = next(i for i, statement in enumerate(body) if "os.makedirs(args.output_dir" in ast.unparse(statement))
        called = {ast.unparse(node.func) for statement in body[:end] for node in ast.walk(statement)
                  if isinstance(node, ast.Call)}
        called = {name.replace("args.", "") for name in called}
        assert called <= NO_REFUSAL_OF_ITS_OWN | {f for functions in START_UP.values() for f in functions}, (
            function.__name__, sorted(called - NO_REFUSAL_OF_ITS_OWN))
        data = "prompt_sets" if function is ppo.run else "pair_sets"  # and the checks come before the folder
        assert {"require_writable", "resolve", "check_files", data, "training_steps", "require_checkpoint_space"} <= called


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_preflight_refuses_what_the_run_refuses_and_neither_leaves_a_folder(case, tmp_path, monkeypatch,
                                                                                capsys):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MARLHF_LOG_LEVEL", "ERROR")
    out = tmp_path / "out"
    extra = case.setup(tmp_path, monkeypatch, out) if case.setup else ()
    existed = out.exists()
    argv = ["--output_dir", str(out), *case.flags, *extra]
    cli = importlib.import_module(f"dschat.cli.{case.stage}")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: cli.main([*argv, "--dry_run"]))
    report = capsys.readouterr()
    assert exit_info.value.code == 2, report
    missing = [line for line in report.out.splitlines() if line.startswith("MISSING")]
    assert len(missing) == 1 and missing[0].startswith("MISSING start-up: "), report.out
    assert out.exists() == existed

    stage = importlib.import_module(f"dschat.stages.{case.stage}")
    home = stage if case.stage == "ppo" else importlib.import_module("dschat.stages.supervised")
    monkeypatch.setattr(home, "init_distributed", lambda: (0, 1, "cpu"))
    with pytest.raises(ValueError) as refused:
        stage.run(cli.build_parser().parse_config(argv))
    assert missing[0] == f"MISSING start-up: {refused.value}"
    assert case.site[1] in str(refused.value)
    assert out.exists() == existed and (not existed or not (out / "run_config.yaml").exists())
