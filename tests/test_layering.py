"""How the house is built: ``dschat`` imports only downwards and holds no import cycle, counting imports inside
functions too; and a termination rule is one new module, found by the registry without any other file naming it.

The floors, lowest first: ``dschat.core`` (flag machinery, entry points, seeding, processes) < ``dschat.data`` and
``dschat.model`` (side by side) < ``dschat.training`` (the loop, checkpoints, faults, records) < ``dschat.rewards``
(sandboxed execution) < ``dschat.rlhf.macro_action`` (the pure-torch rules and macro maths) < ``dschat.rlhf``
(engines, experience, advantage estimators, PPO trainer) < ``dschat.stages`` (each stage's training and every flag
dataclass) < ``dschat.cli`` (the command lines, the segmentation viewer among them) < the ``dschat`` package
itself. A module belongs to the most specific package naming it. "Upward" is an import of a module of a higher
floor; within a floor imports may go any way but must not form a cycle.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch

import macro_oracle as oracle
from conftest import ROOT, build_trainer, padded_rollout

PACKAGE = Path(ROOT) / "dschat"
LAYERS = (("dschat.core",), ("dschat.data", "dschat.model"), ("dschat.training",), ("dschat.rewards",),
          ("dschat.rlhf.macro_action",), ("dschat.rlhf",), ("dschat.stages",), ("dschat.cli",), ("dschat",))
"""The floors, lowest first, each the packages on it; a module belongs to the longest of these prefixes it has."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """The floor (index into LAYERS) of ``module``."""
    floors = {package: floor for floor, packages in enumerate(LAYERS) for package in packages}
    matching = [package for package in floors if module == package or module.startswith(package + ".")]
    return floors[max(matching, key=len)]


def import_graph(package: Path = PACKAGE) -> dict:
    """``{module: {modules of package it imports}}``; ``from package import name`` counts as importing the submodule
    ``package.name`` when that is a module, else the package."""
    paths = {module_name(path): path for path in package.rglob("*.py")}
    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets.update(f"{source}.{alias.name}" if f"{source}.{alias.name}" in paths else source
                               for alias in node.names)
        graph[module] = {target for target in targets if target in paths and target != module}
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_is_read():
    graph = import_graph()
    assert "dschat.rlhf.algorithms" in graph["dschat.stages.configs"]
    assert "dschat.rlhf.macro_action.termination.registry" in graph["dschat.rlhf.macro_action.termination.ngram"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_upward_import_and_no_cycle_in_dschat():
    graph = import_graph()
    upward = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                    if layer_of(target) > layer_of(module))
    assert upward == []
    assert cycles(graph) == []
    assert layer_of("dschat.stages.configs") > layer_of("dschat.rlhf.algorithms") > layer_of("dschat.core.config")
    assert layer_of("dschat.training.loop") > layer_of("dschat.data.schema") == layer_of("dschat.model.names")


def test_every_package_of_dschat_has_a_floor():
    packages = {f"dschat.{path.name}" for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert packages - {package for floor in LAYERS for package in floor} == set()


STUDY = ("design", "history", "stats", "summaries", "decisions", "tables", "position_report", "plots", "report", "findings",
         "positions", "runner", "__main__")
"""``evaluation.study``'s modules in the order its ``__init__`` lists them: each imports only modules before it."""


def test_no_cycle_in_evaluation_and_the_study_imports_only_down_its_own_order():
    graph = import_graph(Path(ROOT) / "evaluation")
    assert cycles(graph) == []
    study = {module for module in graph if module.startswith("evaluation.study.")}
    assert study == {f"evaluation.study.{name}" for name in STUDY}
    later = sorted(f"{module} -> {target}" for module in study for target in graph[module] & study
                   if STUDY.index(target.rpartition(".")[2]) >= STUDY.index(module.rpartition(".")[2]))
    assert later == []
    assert graph["evaluation.study.design"] == set()  # the study's data imports nothing of the project
    assert graph["evaluation.pipeline_record"] & (study | {"evaluation.study"}) == {"evaluation.study.stats"}


RULE = '''"""Two macros per response: its first ceil(n / 2) tokens and the rest."""
import torch

from ..segments import as_action_mask, response_ranks
from .base import Segmentation
from .registry import register_termination


@register_termination("halves", aliases=("two",))
def build_halves(options):
    def rule(batch):
        on = as_action_mask(batch.action_mask)
        ranks = response_ranks(on)
        half = (on.sum(dim=1, keepdim=True) + 1) // 2
        segment_ids = torch.where(on, (ranks >= half).long(), torch.full_like(ranks, -1))
        return Segmentation(segment_ids, torch.zeros(on.shape[0], dtype=torch.bool))
    return rule
'''


def halves(action_mask):
    lengths = [[(n + 1) // 2, n // 2] if n > 1 else [n] for n in oracle.mask_lengths(action_mask)]
    return oracle.segment_ids(action_mask, lengths)


def test_a_new_termination_rule_is_one_module_selected_by_flag(tmp_path, monkeypatch):
    """A rule module dropped into the termination package (here a folder added to its ``__path__``) is listed
    by step 3's parser (without being imported), selected by ``--termination`` (or its alias) and cuts the
    rollouts of a trainer built from those flags: no registry table or import line names it."""
    import dschat.rlhf.macro_action.termination as termination
    from dschat.cli.ppo import build_parser
    from dschat.rlhf.macro_action.termination import registry
    from dschat.core.config import ConfigError, flag_specs

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "halves.py").write_text(RULE)
    module = f"{termination.__name__}.halves"
    monkeypatch.setattr(termination, "__path__", [*termination.__path__, str(rules)])
    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    monkeypatch.delitem(sys.modules, module, raising=False)
    flag_specs.cache_clear()  # the flags' choices are read once per process; this rule arrived mid-process
    try:
        assert {"halves", "two"} <= set(registry.available_terminations()) and module not in sys.modules
        parsed = build_parser().parse_config(["--output_dir", "x", "--termination", "two"])
        assert parsed.termination == "two"
        with pytest.raises(ConfigError, match="--termination thirds"):
            build_parser().parse_config(["--output_dir", "x", "--termination", "thirds"])
        mask = torch.tensor([[0, 1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1, 0]])
        rule = registry.build_termination(parsed.termination, parsed.termination_options(seed=0))
        from dschat.rlhf.macro_action.termination.base import SegmentationBatch

        assert rule(SegmentationBatch(action_mask=mask)).segment_ids.tolist() == halves(mask)
        trainer = build_trainer(tmp_path, ["--termination", "halves"])
        seq, attention_mask, action_mask = padded_rollout(trainer.tokenizer, "left", torch.Generator().manual_seed(0))
        experience, _ = trainer.experience_from_rollout(seq, attention_mask, action_mask)
    finally:
        sys.modules.pop(module, None)
        flag_specs.cache_clear()
    assert experience.segment_ids.tolist() == halves(experience.action_mask)


def test_rule_names_are_read_from_the_modules_without_importing_them():
    """Every shipped rule and the ``ngram`` alias, from the decorators' literals; each name builds its rule."""
    from dschat.rlhf.macro_action.termination import registry

    modules = registry.rule_modules()
    assert modules["fixed"] == ("ngram", "fixed") and modules["ngram"] == ("ngram", "fixed")
    assert {name for name, (_, rule) in modules.items() if name == rule} == {"fixed", "randomized", "ppl",
                                                                             "parsing", "entropy", "turn",
                                                                             "step"}
    assert registry.declared_rules("@register_termination('a', aliases=('b',))\ndef f(o): pass\n") == \
        {"a": "a", "b": "a"}
