"""Bad input to a stage ends with one clear line naming the flag, file or row — never a traceback."""
from __future__ import annotations

import pytest

from conftest import one_line_error
from dschat.cli.sft import main as sft_main


def run_stage(argv, capsys) -> str:
    return one_line_error(sft_main, argv, capsys)


@pytest.mark.parametrize("flags, expected", [
    (["--data_name", "jsonl", "--data_path", "/nonexistent/data.jsonl"], "/nonexistent/data.jsonl"),
    (["--data_name", "nosuchset"], "nosuchset"),
    (["--model_name_or_path", "./no/such/model"], "./no/such/model"),
    (["--data_split", "0,0,0"], "0,0,0"),
    (["--data_split", "2,four,4"], "2,four,4"),
], ids=["missing-file", "unknown-dataset", "missing-model", "zero-split", "unparsable-split"])
def test_bad_flags_give_one_line_errors(tmp_path, capsys, flags, expected):
    message = run_stage(["--output_dir", str(tmp_path), "--no_progress_bar"] + flags, capsys)
    assert expected in message


def test_row_missing_a_field_names_file_and_row(tmp_path, capsys):
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "Q: hi\\nA:", "chosen": " hello"}\n{"prompt": "Q: bye\\nA:"}\n')
    message = run_stage(["--output_dir", str(tmp_path / "out"), "--data_name", "jsonl", "--data_path", str(data)],
                        capsys)
    assert "pairs.jsonl" in message and "2" in message and "chosen" in message


def test_an_abbreviated_flag_is_refused_with_the_flag_it_nears(tmp_path, capsys):
    message = run_stage(["--output_dir", str(tmp_path), "--learning_rat", "1e-3"], capsys)
    assert message == ("error: unrecognized arguments: --learning_rat 1e-3; --learning_rat: did you mean "
                       "--learning_rate?")
    message = run_stage(["--output_dir", str(tmp_path), "--conf", "x.yaml"], capsys)  # not taken as --config
    assert message.endswith("--conf: did you mean --config?")
    message = run_stage(["--output_dir", str(tmp_path), "--zzz", "1"], capsys)  # nothing near: no guess
    assert message == "error: unrecognized arguments: --zzz 1"


def test_a_near_miss_yaml_key_names_the_key_it_nears(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("learning_rat: 0.001\n")
    message = run_stage(["--output_dir", str(tmp_path), "--config", str(config)], capsys)
    assert message == (f"error: --config {config}: unknown key 'learning_rat' (not a flag of this stage; did you "
                       f"mean learning_rate?)")


def test_every_parser_of_the_project_refuses_abbreviations():
    """Every command line is an ``ArgumentParser`` of ``dschat.core.entrypoint`` or says ``allow_abbrev=False``
    (the benchmarks, which run without the package), so ``--learning_rat`` is never ``--learning_rate``."""
    import re
    from pathlib import Path

    from conftest import ROOT

    plain = []
    for path in sorted(Path(ROOT).glob("**/*.py")):
        parts = path.relative_to(ROOT).parts
        if {".venv", "tests", "outputs"} & set(parts) or parts[0].startswith(".bench-venv"):  # TRL's own venvs
            continue
        for match in re.finditer(r"argparse\.ArgumentParser\(([^)]*)", path.read_text()):
            if "allow_abbrev=False" not in match.group(1):
                plain.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert plain == []


@pytest.mark.parametrize("module, argv, expected", [
    ("evaluation.curves", ["--run", "a=x", "--smoothin", "0.5"], "--smoothin: did you mean --smoothing?"),
    ("evaluation.plots", ["distributions", "--scores", "a=x", "--out", "y", "--titl", "t"],
     "--titl: did you mean --title?"),
])
def test_evaluation_tools_refuse_abbreviations_with_a_guess(module, argv, expected, capsys):
    import importlib

    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module).main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().endswith(expected)


def test_a_reward_model_row_without_rejected_names_file_and_row(tmp_path, capsys):
    import json

    from dschat.cli.rm import main as rm_main

    rows = [{"prompt": f"Q: {k}\nA:", "chosen": " good", "rejected": " bad"} for k in range(20)]
    del rows[6]["rejected"]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    message = one_line_error(rm_main, ["--output_dir", str(tmp_path / "out"), "--data_name", "jsonl", "--data_path",
                                       str(data), "--model_name_or_path", "tiny-gemma", "--no_progress_bar"], capsys)
    assert message.startswith(f"error: {data}, row 7: no 'rejected' response")


@pytest.mark.parametrize("stage", ["sft", "rm", "dpo", "ppo"])
def test_a_data_path_without_a_dataset_is_read_as_jsonl(stage, tmp_path):
    from dschat.cli import stage_parser

    parse = stage_parser(stage).parse_config
    flags = ["--output_dir", str(tmp_path), "--data_path", "rows.jsonl"]
    assert parse(flags).data_name == "jsonl"
    assert parse(flags + ["--data_name", "synthetic"]).data_name == "synthetic"  # named: as given
    assert parse(flags + ["--data_name", "tldr"]).data_name == "tldr"
    assert parse(["--output_dir", str(tmp_path)]).data_name == "synthetic"  # no file: the embedded default


@pytest.mark.parametrize("stage", ["sft", "rm", "dpo", "ppo"])
def test_a_dataset_named_in_a_config_file_is_kept_with_a_data_path(stage, tmp_path):
    """``data_name: synthetic`` (the default's value) in a --config file is named by the user as much as the flag:
    a --data_path does not turn it into jsonl, through the parser and every rule of the stage."""
    from dschat.cli import stage_parser
    from dschat.stages.resolve import resolve

    config = tmp_path / "data.yaml"
    config.write_text("data_name: synthetic\n")
    flags = ["--output_dir", str(tmp_path), "--data_path", "rows.jsonl"]
    flags += ["--reward_model_name_or_path", "tiny-gemma"] if stage == "ppo" else []
    args = stage_parser(stage).parse_config(["--config", str(config), *flags])
    assert args.data_name == "synthetic" and resolve(stage, args, 1).data_name == "synthetic"
    config.write_text("data_split: 1,1,1\n")  # a config that names no dataset: the rows are jsonl
    assert resolve(stage, stage_parser(stage).parse_config(["--config", str(config), *flags]), 1).data_name == "jsonl"
