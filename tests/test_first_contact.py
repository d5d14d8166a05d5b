"""What a newcomer meets first: values for ``$(...)`` alone on stdout, missing paths named in one line,
overridden flags announced, the run record in the output directory (issue: first contact)."""
import json
import logging
import os
import re
import subprocess

import pytest

from conftest import ROOT, read_metrics
from dschat.model import smollm2


def test_value_tool_prints_only_the_value_on_stdout(tmp_path, monkeypatch, capfd):
    """``JUDGE=$(python -m dschat.model.smollm2)`` captures the directory only, even when a library prints
    a warning on stdout (DeepSpeed's accelerator warning did, on the first, converting run)."""
    def noisy_convert(out_dir):
        print("[WARNING] Setting accelerator to CPU.")  # a logger that holds sys.stdout
        os.write(1, b"native noise\n")  # C code writing to fd 1
        return tmp_path / "smollm2"

    monkeypatch.setattr(smollm2, "convert_smollm2", noisy_convert)
    smollm2.main([])
    out, err = capfd.readouterr()
    assert out == f"{tmp_path / 'smollm2'}\n"
    assert "Setting accelerator" in err and "native noise" in err


def test_a_derived_value_replacing_an_explicit_flag_is_announced(caplog):
    from dschat.cli import stage_parser
    from dschat.stages.resolve import resolve_algorithm, resolve_batches

    base = ["--output_dir", "out", "--global_batch_size", "8"]
    given = stage_parser("ppo").parse_config(base + ["--per_device_generation_batch_size", "2"])
    with caplog.at_level(logging.WARNING):
        resolved = resolve_batches(resolve_algorithm(given), world_size=2)
    assert resolved.per_device_generation_batch_size == 4
    [line] = [record.getMessage() for record in caplog.records]
    assert line.startswith("--per_device_generation_batch_size 2 replaced by 4: --global_batch_size 8 on 2 processes")
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the same value from the default: nothing to announce
        resolve_batches(resolve_algorithm(stage_parser("ppo").parse_config(base)), world_size=2)
    assert caplog.records == []


def test_explicit_flags_are_those_of_the_command_line_not_of_a_config(tmp_path):
    from dschat.cli import stage_parser

    config = tmp_path / "c.yaml"
    config.write_text("learning_rate: 0.1\nper_device_train_batch_size: 3\n")
    args = stage_parser("sft").parse_config(["--config", str(config), "--output_dir", "o", "--learning_rate", "0.2",
                                             "--no_progress_bar"])
    assert args.explicit_flags == {"output_dir", "learning_rate", "no_progress_bar"}
    assert (args.learning_rate, args.per_device_train_batch_size) == (0.2, 3)


def sft_run(tmp_path, *flags):
    from conftest import SFT_FLAGS
    from dschat.cli.sft import main

    out = tmp_path / "run"
    main(SFT_FLAGS + ["--output_dir", str(out), "--max_steps", "1", "--max_eval_samples", "8", *flags])
    return out


def test_run_config_records_resolved_flags_argv_commit_and_versions(tmp_path, monkeypatch):
    import importlib.metadata

    import yaml

    monkeypatch.setattr("sys.argv", ["training/step1_supervised_finetuning/main.py", "--seed", "7"])
    out = sft_run(tmp_path, "--report_to", "none", "--global_batch_size", "4")
    record = yaml.safe_load((out / "run_config.yaml").read_text())
    assert record["stage"] == "sft" and record["world_size"] == 1
    assert record["argv"][1:] == ["training/step1_supervised_finetuning/main.py", "--seed", "7"]
    config = record["config"]
    assert config["output_dir"] == str(out) and config["report_to"] == ["none"]
    assert (config["per_device_train_batch_size"], config["gradient_accumulation_steps"]) == (4, 1)  # resolved
    assert "report_to" in config["explicit_flags"]
    assert record["versions"]["torch"] == importlib.metadata.version("torch")
    from dschat.core.machine import machine_record

    assert record["machine"] == machine_record() and record["machine"]["cpu"]  # the machine of the figures
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert record["git"]["commit"] == commit
    assert not (out / "tensorboard").exists()  # --report_to none
    assert (out / "metrics.jsonl").exists()


@pytest.mark.slow
def test_report_to_wandb_offline_logs_the_same_scalars(tmp_path, monkeypatch):
    """``--report_to tensorboard wandb`` with ``WANDB_MODE=offline``: a local W&B run under the output directory
    whose history holds the scalars of metrics.jsonl (read back from the offline run file)."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = sft_run(tmp_path, "--report_to", "tensorboard", "wandb", "--log_steps", "1")
    assert (out / "tensorboard").is_dir()
    run_id = (out / "wandb_run_id").read_text()
    [run_file] = (out / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    logged = history_values(run_file.read_bytes())
    final = read_metrics(str(out))[-1]
    for key, value in final.items():
        if key != "step":
            assert logged[key][-1] == pytest.approx(value), key


def history_values(data: bytes) -> dict:
    """``{key: [values]}`` of the history items in an offline W&B run file: each item is a protobuf message whose
    field 2 is the key and field 16 the JSON value (``\\x12 len key \\x82\\x01 len value``)."""
    values: dict = {}
    for match in re.finditer(rb"\x12([\x01-\x7f])", data):
        start = match.end()
        key = data[start:start + match.group(1)[0]]
        tail = data[start + len(key):]
        if tail[:2] == b"\x82\x01" and len(tail) > 2:
            text = tail[3:3 + tail[2]]
            try:
                values.setdefault(key.decode(), []).append(json.loads(text))
            except (UnicodeDecodeError, ValueError):
                continue
    return values


def unfinished_ppo_run(directory, finished=False):
    """A step-3 output directory: run_config.yaml from its start, two evaluations logged, finished or not."""
    directory.mkdir(parents=True)
    (directory / "metrics.jsonl").write_text('{"step": 0, "eval/score": 0.1}\n{"step": 40, "eval/score": 0.5}\n')
    (directory / "run_config.yaml").write_text(f"stage: ppo\nfinished: {'2026-11-24T01:00:00+00:00' if finished else 'null'}\n")
    return str(directory)


def test_paper_numbers_refuses_an_unfinished_run_unless_asked(tmp_path, capsys):
    from evaluation import paper_numbers

    run = unfinished_ppo_run(tmp_path / "ppo")
    with pytest.raises(SystemExit):
        paper_numbers.main(["table2", "--result", f"tldr:ppo={run}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unfinished run" in err[0] and "step 40" in err[0] and run in err[0]
    paper_numbers.main(["table2", "--result", f"tldr:ppo={run}", "--allow_unfinished"])
    out, err = capsys.readouterr()
    assert "Vanilla PPO         0.500" in out and "unfinished run" in err


def test_paper_numbers_method_names_are_case_insensitive(tmp_path, capsys):
    from evaluation import paper_numbers

    ppo = unfinished_ppo_run(tmp_path / "ppo", finished=True)
    paper_numbers.main(["table2", "--result", f"TLDR:PPO={ppo}", "--result", f"tldr:MAPPO={ppo}"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Table 2 - test RM score on tldr") and len(lines) == 4  # title, header, 2 methods
    assert lines[2].startswith("Vanilla PPO         0.500") and lines[3].startswith("MA-PPO (n=?)        0.500")
    # table7_cpu.sh's spelling, and a second run (seed) of the same method under another spelling
    paper_numbers.main(["table7", "--paper_task", "tldr", "--result", f"synthetic:MA-PPO={ppo}",
                        "--result", f"synthetic:ma_ppo={ppo}", "--result", f"synthetic:Vanilla-PPO={ppo}"])
    lines = capsys.readouterr().out.splitlines()
    rows = {line[:16].strip(): line[16:].split() for line in lines[2:]}
    assert list(rows) == ["SFT", "DPO", "RLOO", "Vanilla PPO", "MA-PPO (n=?)"]  # no extra "ma-ppo" row
    assert rows["MA-PPO (n=?)"] == ["0.500", "+0%", "2", "1.400", "+69%"]  # filled, from 2 runs
    assert rows["Vanilla PPO"] == ["0.500", "1", "0.830"]


def test_curves_say_when_a_run_is_unfinished(tmp_path, capsys):
    from evaluation import curves

    done = unfinished_ppo_run(tmp_path / "ppo", finished=True)
    running = unfinished_ppo_run(tmp_path / "mappo")
    curves.main(["--run", f"ppo={done}", "--run", f"mappo={running}"])
    out, err = capsys.readouterr()
    assert "ppo (1 run): test RM score 0.100 (step 0) -> 0.500 (step 40)\n" in out
    assert "mappo (1 run): test RM score 0.100 (step 0) -> 0.500 (step 40, unfinished)" in out
    assert err.strip() == (f"warning: {running}: unfinished run (no final model yet): its last point, step 40, is "
                           "not a final score")
    method = curves.method_curves("mappo", [running])
    assert method.last_label == "latest test score (unfinished run)"
    assert curves.method_curves("ppo", [done]).last_label == "final test score"


def test_rm_score_names_a_missing_policy_directory_in_one_line(tmp_path, monkeypatch, capsys):
    from conftest import one_line_error
    from evaluation import rm_score

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    message = one_line_error(rm_score.main, ["--policy", "x=outputs/nope", "--reward_model", "tiny-gemma",
                                             "--output_dir", "scores"], capsys)
    assert message.startswith("error: --policy x=outputs/nope: no such directory outputs/nope")
    message = one_line_error(rm_score.main, ["--policy", "tiny-gemma", "--reward_model", "outputs/rm",
                                             "--output_dir", "scores"], capsys)
    assert message.startswith("error: --reward_model no such directory outputs/rm")


def test_an_uncached_hub_id_while_offline_is_one_line_at_once(monkeypatch):
    import socket
    import time

    from dschat.model import ModelLoadError, load_tokenizer

    def no_network(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    start = time.monotonic()
    with pytest.raises(ModelLoadError) as error:
        load_tokenizer("some-org/never-downloaded-model")
    assert time.monotonic() - start < 5
    message = str(error.value)
    assert "\n" not in message and "some-org/never-downloaded-model" in message
    assert "not in the local hub cache" in message and "cannot be reached" in message


def test_loading_and_saving_models_draws_no_bars_and_no_load_report_table(tmp_path, capfd, caplog):
    """transformers' "Loading weights" / "Writing model shards" bars and its LOAD REPORT table (here: the reward
    head a causal-LM checkpoint lacks) stay off the terminal; the report is kept at DEBUG."""
    from dschat.model import load_causal_lm, load_reward_model, load_tokenizer

    tokenizer = load_tokenizer("tiny-gemma")
    load_causal_lm("tiny-gemma", tokenizer).save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG, logger="dschat.model.loading"):
        load_reward_model(str(tmp_path / "ckpt"), tokenizer)
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err and "LOAD REPORT" not in out + err
    assert any("LOAD REPORT" in record.getMessage() for record in caplog.records)
