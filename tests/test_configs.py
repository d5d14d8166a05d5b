"""One source of truth for flags and configs: every YAML under configs/ parses with its stage's parser and
holds only what differs from its parent layer, every default shows in --help and is declared once, and bad
values from YAML or the command line end in one line naming the flag or the file and key."""
from __future__ import annotations

import dataclasses
import glob
import os

import pytest

from conftest import ROOT, one_line_error
from dschat.cli import stage_parser
from dschat.stages.configs import STAGE_CONFIGS
from dschat.core.config import CONFIG_FLAGS, EXPLICIT_FLAGS, ConfigError, check_layer, config_layers, flag_specs

CONFIGS = sorted(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "configs", "**", "*.yaml"),
                                                                     recursive=True))


def stage_of(path: str) -> str:
    return path.split(os.sep)[1]


def test_configs_are_found():
    assert {stage_of(path) for path in CONFIGS} == set(STAGE_CONFIGS)
    assert len(CONFIGS) >= 4 * 9


@pytest.mark.parametrize("path", CONFIGS)
def test_every_config_parses_with_its_stage_parser(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = stage_parser(stage_of(path)).parse_config(["--config", path, "--output_dir", str(tmp_path)])
    assert isinstance(args, STAGE_CONFIGS[stage_of(path)])
    written = {}  # the raw YAML values, later layers winning: each must reach the parsed config unchanged
    for _, values in config_layers(os.path.join(ROOT, path)):
        written.update(values)
    assert written
    for key, value in written.items():
        assert getattr(args, key) == value, (key, getattr(args, key), value)


@pytest.mark.parametrize("path", CONFIGS)
def test_no_config_value_repeats_what_its_parent_layers_or_the_defaults_say(path):
    specs = stage_parser(stage_of(path)).specs
    layers = config_layers(os.path.join(ROOT, path))
    inherited = {name: spec.default for name, spec in specs.items()}
    for layer_path, values in layers[:-1]:
        inherited.update(check_layer(layer_path, values, specs))
    own = check_layer(*layers[-1], specs)
    repeated = {key: value for key, value in own.items() if inherited[key] == value}
    assert not repeated, f"{path} repeats inherited/default values: {repeated}"


@pytest.mark.parametrize("stage", sorted(STAGE_CONFIGS))
def test_help_shows_every_default(stage):
    parser = stage_parser(stage)
    text = parser.format_help()
    flags = [action for action in parser._actions if action.dest != "help"]
    fields = [field for field in dataclasses.fields(STAGE_CONFIGS[stage])
              if field.name not in (EXPLICIT_FLAGS, CONFIG_FLAGS)]
    assert len(flags) == len(fields) + 1  # + --config; explicit_flags, config_flags are filled by the parser
    for action in flags:
        assert "(default: " in action.help or "(required)" in action.help, action.option_strings
        assert action.option_strings[0] in text
    assert "(default: 1.5e-05)" in stage_parser("ppo").format_help()


def test_each_default_is_declared_once():
    """A field redeclared by a subclass (a stage-specific default) must change the default."""
    declared = {}
    for config in STAGE_CONFIGS.values():
        for klass in config.__mro__:
            for name in vars(klass).get("__annotations__", {}):
                declared.setdefault(name, {})[klass] = getattr(klass, name, None)
    for name, by_class in declared.items():
        defaults = list(by_class.values())
        assert len(defaults) == len(set(map(repr, defaults))), (name, by_class)


@pytest.mark.parametrize("stage, flags, expected", [
    ("ppo", ["--kl_coef", "-1"], "--kl_coef -1.0: expected a number >= 0"),
    ("ppo", ["--per_device_train_batch_size", "0"], "--per_device_train_batch_size 0: expected an integer >= 1"),
    ("ppo", ["--per_device_training_batch_size", "0"], "--per_device_train_batch_size 0: expected an integer >= 1"),
    ("ppo", ["--gamma", "1.5"], "--gamma 1.5: expected a number >= 0 and <= 1"),
    ("ppo", ["--sigma", "median"], "--sigma median: expected one of equal, unit, position"),
    ("ppo", ["--ngram", "-2"], "--ngram -2: expected a positive integer, or 0 / inf"),
    ("sft", ["--num_train_epochs", "1.5"], "--num_train_epochs 1.5: expected an integer"),
    ("sft", ["--learning_rate", "fast"], "--learning_rate fast: expected a number > 0"),
    ("sft", ["--zero_stage", "4"], "--zero_stage 4: expected one of 0, 1, 2, 3"),
    ("sft", ["--no_such_flag"], "unrecognized arguments: --no_such_flag"),
])
def test_bad_flags_give_one_line_naming_the_flag_and_the_range(stage, flags, expected, tmp_path, capsys):
    message = one_line_error(lambda argv: stage_parser(stage).parse_config(argv),
                             ["--output_dir", str(tmp_path)] + flags, capsys)
    assert expected in message


@pytest.mark.parametrize("yaml_text, expected", [
    ("learning_rate: [1, 2]\n", "learning_rate: [1, 2]: expected a single value"),
    ("num_train_epochs: 1.5\n", "num_train_epochs 1.5: expected an integer >= 1"),
    ("num_train_epochs: true\n", "num_train_epochs: True: expected an integer >= 1"),
    ("gradient_checkpointing: 1\n", "gradient_checkpointing: 1: expected true or false"),
    ("per_device_train_batch_size: 0\n", "per_device_train_batch_size 0: expected an integer >= 1"),
    ("dtype: fp8\n", "dtype fp8: expected one of fp32, bf16, fp16"),
    ("learning_rat: 0.5\n", "unknown key 'learning_rat'"),
])
def test_bad_config_values_give_one_line_naming_file_and_key(yaml_text, expected, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    message = one_line_error(lambda argv: stage_parser("sft").parse_config(argv),
                             ["--config", str(path), "--output_dir", str(tmp_path / "out")], capsys)
    assert str(path) in message and expected in message


def test_config_values_are_typed_like_flags_and_layers_override_in_order(tmp_path):
    (tmp_path / "base.yaml").write_text("actor_learning_rate: 1.0e-4\nnum_train_epochs: 2\nrandom_lengths: [2, 3]\n")
    (tmp_path / "model.yaml").write_text("inherit: base.yaml\nnum_train_epochs: 3\nngram: inf\n")
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "t.yaml").write_text("inherit: ../model.yaml\nwarmup_steps: 7\n")
    args = stage_parser("ppo").parse_config(["--config", str(tmp_path / "task" / "t.yaml"), "--output_dir", "x",
                                             "--random_lengths", "4", "5,6"])
    assert (args.num_train_epochs, args.ngram, args.warmup_steps) == (3, None, 7)
    assert args.random_lengths == (4, 5, 6)


def test_inherit_cycle_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("inherit: b.yaml\n")
    (tmp_path / "b.yaml").write_text("inherit: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        stage_parser("sft").parse_config(["--config", str(tmp_path / "a.yaml"), "--output_dir", "x"])


def test_output_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    existing = tmp_path / "file.txt"
    existing.write_text("not a directory")
    message = one_line_error(lambda argv: stage_parser("rm").parse_config(argv), ["--output_dir", str(existing)],
                             capsys)
    assert "--output_dir" in message and "is a file" in message


def test_renamed_flags_keep_their_old_names_as_aliases():
    old = stage_parser("ppo").parse_config(["--output_dir", "x", "--value_function", "unit", "--macro_reward", "mean",
                                            "--ma_ratio", "macro", "--clip_ratio", "0.1", "--max_answer_seq_len", "9",
                                            "--num_warmup_steps", "3", "--per_device_training_batch_size", "2"])
    new = stage_parser("ppo").parse_config(["--output_dir", "x", "--sigma", "unit", "--reward_agg", "mean",
                                            "--ratio", "macro", "--clip_eps", "0.1", "--max_new_tokens", "9",
                                            "--warmup_steps", "3", "--per_device_train_batch_size", "2"])
    assert old == new


def test_every_field_has_a_docstring():
    for config in STAGE_CONFIGS.values():
        missing = [spec.name for spec in flag_specs(config) if not spec.help]
        assert not missing, (config.__name__, missing)


def test_show_config_names_the_layer_of_every_value_and_the_warmup_that_wins(capsys):
    """Each value's layer is the last YAML file of the inherit chain that holds its key (read here from the files
    themselves), else ``default``; a flag after ``--`` is ``flag``; the warmup line says which of the two wins."""
    import yaml

    from dschat.cli import show_config
    from dschat.core.config import config_layers

    path = os.path.join(ROOT, "configs", "ppo", "gemma-2b", "tldr.yaml")
    expected = {}
    for layer_path, raw in config_layers(path):
        with open(layer_path) as handle:
            assert set(raw) <= set(yaml.safe_load(handle))
        expected.update({key.replace("-", "_"): layer_path for key in raw})
    show_config.main(["ppo", path, "--", "--temperature", "0.7", "--warmup_steps", "none"])
    lines = capsys.readouterr().out.splitlines()
    layers = dict(line.rsplit("  [", 1) for line in lines if "  [" in line)
    layers = {entry.split(":")[0]: layer.rstrip("]") for entry, layer in layers.items()}
    assert layers["temperature"] == "flag" and layers["warmup_steps"] == "flag"
    for key, layer in layers.items():
        if key not in ("temperature", "warmup_steps", "output_dir"):
            assert layer == expected.get(key, "default"), key
    assert layers["output_dir"] == "required flag, not given"
    assert len(set(expected.values())) >= 2  # the chain really has layers
    assert lines[-1].startswith("warmup: --warmup_ratio 0.1 [default] of the optimizer steps")
    show_config.main(["ppo", path])
    assert capsys.readouterr().out.splitlines()[-1] == ("warmup: --warmup_steps 200 [default] wins; --warmup_ratio "
                                                         "0.1 [default] is not used")


@dataclasses.dataclass
class _Signed:
    """test flags"""

    shift: float = 0.0
    """A signed number."""
    steps: int = 1
    """A signed count."""


@pytest.mark.parametrize("text, value", [("-1e-5", -1e-5), ("-2.5E3", -2500.0), ("-.5", -0.5), ("-3", -3.0)])
def test_a_negative_number_after_a_space_is_the_flags_value(text, value):
    """``--flag -1e-5`` (with a space) is the value, as ``--flag=-1e-5`` is: argparse's own pattern took a negative
    number with an exponent for an option ("expected one argument")."""
    from dschat.core.config import ConfigParser

    parser = ConfigParser(_Signed)
    assert parser.parse_config(["--shift", text, "--steps", "-2"]) == _Signed(shift=value, steps=-2)
    assert parser.parse_config([f"--shift={text}"]).shift == value


def test_a_negative_learning_rate_is_refused_for_its_value_not_its_spelling(capsys):
    message = one_line_error(stage_parser("ppo").parse_config, ["--output_dir", "o", "--actor_learning_rate", "-1e-5"],
                             capsys)
    assert message == "error: --actor_learning_rate -1e-05: expected a number > 0"
