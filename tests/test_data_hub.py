"""Hub datasets at a pinned commit: the hub path (HF cache), local mirrors, the held-out evaluation split, and
the one-line errors of local files (issues 11, 15, 17)."""
import gzip
import json
import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from dschat.data import DataError, DataOptions, load_code_tasks, load_pairs
from dschat.data.adapters import apps, hh_rlhf, tldr, webgpt
from dschat.data.holdout import holdout_indices
from dschat.data.stage_data import eval_code_tasks, eval_pairs, train_code_tasks, train_pairs

HUB = Path(__file__).parent / "fixtures" / "data" / "hub"
SOURCES = {"tldr": tldr.SOURCE, "webgpt": webgpt.SOURCE, "hh-rlhf": hh_rlhf.SOURCE, "apps": apps.SOURCE}


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An offline HF cache holding every fixture repository as the snapshot of its pinned commit."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hf-cache"
    for source in SOURCES.values():
        owner, name = source.repo.split("/")
        shutil.copytree(HUB / source.repo, cache / f"datasets--{owner}--{name}" / "snapshots" / source.revision,
                        ignore=shutil.ignore_patterns("*.py"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_every_source_is_pinned_to_a_full_commit_and_its_fixture_has_the_hub_paths():
    for source in SOURCES.values():
        assert len(source.revision) == 40 and int(source.revision, 16) >= 0
        for path in source.files.values():
            assert (HUB / source.repo / path).is_file(), path


@pytest.mark.parametrize("name, split, expected", [
    ("tldr", "train", 3), ("tldr", "validation", 4),
    ("webgpt", "train", 38), ("webgpt", "validation", 2),
    ("hh-rlhf", "train", 2), ("hh-rlhf", "validation", 2), ("hh-rlhf", "test", 2),
])
def test_hub_path_reads_the_pinned_files_like_the_local_mirror(hf_cache, name, split, expected):
    from_hub = load_pairs(name, split)
    assert from_hub == load_pairs(name, split, HUB / SOURCES[name].repo)
    assert len(from_hub) == expected


@pytest.mark.parametrize("split, expected", [("train", ["12", "2437", "4500", "4999"]), ("validation", ["0", "1"])])
def test_apps_hub_path_reads_the_pinned_jsonl(hf_cache, split, expected):
    tasks = load_code_tasks("apps", split)
    assert [task.task_id for task in tasks] == expected
    assert tasks == load_code_tasks("apps", split, HUB / "codeparrot/apps")


def deepspeed_chat_train_eval(n, seed=1234, data_split="95,5"):
    """DeepSpeed-Chat's get_raw_dataset_split_index (data_utils.py), written out independently."""
    splits = [float(s) for s in data_split.split(",")]
    splits = [split / sum(splits) for split in splits]
    index = [0]
    for split in splits:
        index.append(index[-1] + int(round(split * float(n))))
    diff = index[-1] - n
    index = [index[0]] + [i - diff for i in index[1:]]
    shuffle = np.arange(n, dtype=np.uint32)
    np.random.RandomState(seed=seed).shuffle(shuffle)
    return shuffle[index[0]:index[1]].tolist(), shuffle[index[1]:index[2]].tolist()


def test_webgpt_matches_deepspeed_chat_split_template_and_tie_rule():
    rows = pq.read_table(HUB / webgpt.SOURCE.repo / webgpt.SOURCE.files["train"]).to_pylist()
    train_index, eval_index = deepspeed_chat_train_eval(len(rows))
    for split, index in (("train", train_index), ("validation", eval_index)):
        pairs = load_pairs("webgpt", split, HUB / webgpt.SOURCE.repo)
        assert [pair.prompt for pair in pairs] == [
            " Human: " + rows[i]["question"]["full_text"] + " Assistant:" for i in index]
        chosen = [rows[i]["answer_0"] if float(rows[i]["score_0"]) >= float(rows[i]["score_1"])
                  else rows[i]["answer_1"] for i in index]
        assert [pair.chosen for pair in pairs] == [" " + webgpt.strip_citations(text).strip() for text in chosen]


def test_holdout_reproduces_table_4_webgpt_counts():
    """19,578 WebGPT rows -> 18,599 train / 979 test (Table 4: 18.5k / 979), the last part of the shuffle."""
    train, evaluation = holdout_indices(19578, False), holdout_indices(19578, True)
    assert (len(train), len(evaluation)) == (18599, 979)
    assert (train, evaluation) == deepspeed_chat_train_eval(19578)
    assert sorted(train + evaluation) == list(range(19578))


def test_holdout_gives_a_tiny_file_one_evaluation_row():
    assert [len(holdout_indices(n, True)) for n in (1, 2, 4, 9, 30)] == [0, 1, 1, 1, 2]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def canonical_rows(n):
    return [{"prompt": f"Question {k}?\n", "chosen": f" answer {k}", "rejected": " no"} for k in range(n)]


def data_args(**overrides):
    base = dict(data_name="jsonl", data_path=None, eval_data_path=None, data_split="2,4,4", seed=1234,
                data_cache_dir=None, max_train_samples=0, max_eval_samples=0)
    return SimpleNamespace(**{**base, **overrides})


def test_single_file_without_eval_path_holds_out_its_last_part_and_says_so(tmp_path, caplog):
    """Issue 15/17: evaluation no longer reads the training rows of a lone --data_path file."""
    path = write_jsonl(tmp_path / "pairs.jsonl", canonical_rows(40))
    args = data_args(data_path=str(path), data_split="1,0,0")
    with caplog.at_level(logging.INFO):
        train, evaluation = train_pairs(args, phase=0), eval_pairs(args)
    assert "a single --data_path file and no --eval_data_path" in caplog.text
    train_prompts, eval_prompts = {p.prompt for p in train}, {p.prompt for p in evaluation}
    assert not train_prompts & eval_prompts and len(train_prompts | eval_prompts) == 40
    assert sorted(eval_prompts) == sorted(f"Question {k}?\n" for k in deepspeed_chat_train_eval(40)[1])


def test_eval_data_path_makes_the_data_path_file_all_training_rows(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", canonical_rows(40))
    held = write_jsonl(tmp_path / "held.jsonl", canonical_rows(3))
    args = data_args(data_path=str(path), eval_data_path=str(held), data_split="1,0,0")
    assert len(train_pairs(args, phase=0)) == 40
    assert [pair.prompt for pair in eval_pairs(args)] == ["Question 0?\n", "Question 1?\n", "Question 2?\n"]


@pytest.mark.parametrize("name", ["tldr", "hh-rlhf"])
def test_single_hub_schema_file_is_split_too(tmp_path, name):
    mirror = HUB / SOURCES[name].repo
    rows = pq.read_table(mirror / SOURCES[name].files[SOURCES[name].splits["validation"]]).to_pylist() * 10
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    train, evaluation = load_pairs(name, "train", path), load_pairs(name, "validation", path)
    assert (len(train), len(evaluation)) == (len(deepspeed_chat_train_eval(len(rows))[0]),
                                             len(deepspeed_chat_train_eval(len(rows))[1]))


def test_apps_tasks_without_tests_are_counted_and_left_out_of_ppo_and_evaluation(caplog):
    args = data_args(data_name="apps", data_path=str(HUB / "codeparrot/apps"), data_split="0,0,1")
    with caplog.at_level(logging.WARNING):
        ppo, evaluation = train_code_tasks(args), eval_code_tasks(args)
    assert [task.task_id for task in ppo] == ["12", "2437", "4500"]
    assert [task.task_id for task in evaluation] == ["0"]
    assert "apps PPO code tasks: skipped 1 of 4 rows: no test cases (empty input_output): 1 (e.g. problem_id 4999)" \
        in caplog.text
    assert "apps evaluation code tasks: skipped 1 of 2 rows" in caplog.text


def test_data_flags_reach_the_adapters():
    from dschat.cli import stage_parser

    parser = stage_parser("sft")
    defaults = parser.parse_config(["--output_dir", "x"])
    assert DataOptions.from_args(defaults) == DataOptions()
    args = parser.parse_config(["--output_dir", "x", "--webgpt_ties", "drop", "--webgpt_template", "hh",
                                "--tldr_cnndm", "drop", "--eval_holdout", "9,1"])
    assert DataOptions.from_args(args) == DataOptions("9,1", "drop", "hh", "drop")
    assert DataOptions.from_args(SimpleNamespace(data_name="tldr")) == DataOptions()


@pytest.mark.parametrize("options, flag", [
    (dict(webgpt_ties="sometimes"), "--webgpt_ties 'sometimes': expected one of keep, drop"),
    (dict(eval_holdout="95"), "--eval_holdout '95': expected two positive numbers"),
    (dict(eval_holdout="100,0"), "--eval_holdout '100,0': expected two positive numbers"),
])
def test_bad_options_are_one_line_errors(options, flag):
    with pytest.raises(DataError, match=flag.replace("(", r"\(")):
        DataOptions(**options)


def test_mirror_missing_the_split_file_names_what_it_looked_for(tmp_path):
    (tmp_path / "train.jsonl").write_text("{}\n")
    with pytest.raises(DataError, match=r"no file for split 'validation' \(looked for test\{.*\} or validation\{"):
        load_pairs("hh-rlhf", "validation", tmp_path)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".jsonl.gz"])
def test_invalid_utf8_names_file_and_row(tmp_path, suffix):
    """Issue 11: a bad byte is a one-line error naming the file and the line, for every local reader."""
    content = b'{"prompt": "p", "chosen": " c"}\n{"prompt": "caf\xff", "chosen": " c"}\n'
    path = tmp_path / f"rows{suffix}"
    path.write_bytes(gzip.compress(content) if suffix.endswith(".gz") else content)
    with pytest.raises(DataError) as caught:
        load_pairs("jsonl", "train", path)
    assert str(caught.value) == (f"{path}, row 2: invalid UTF-8 (byte 0xff at column 16); "
                                 "the file must be UTF-8 text")


@pytest.mark.parametrize("which", ["data_path", "eval_data_path"])
def test_empty_train_or_eval_file_fails_at_load_naming_it(tmp_path, which):
    """Issue 15: no fake eval/loss=0 from an empty file; the load fails with one line naming the file."""
    good = write_jsonl(tmp_path / "good.jsonl", canonical_rows(5))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    args = data_args(data_split="1,0,0", **{"data_path": str(good), "eval_data_path": str(good), which: str(empty)})
    load = (lambda: train_pairs(args, 0)) if which == "data_path" else (lambda: eval_pairs(args))
    with pytest.raises(DataError) as caught:
        load()
    assert str(caught.value) == f"{empty}: the file has no rows (expected one JSON object per row)"


def test_file_whose_rows_are_all_skipped_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "blank.jsonl", [{"prompt": "p", "chosen": "  "}] * 3)
    with pytest.raises(DataError, match=r"blank.jsonl: all 3 rows were skipped \(empty response: 3\)"):
        load_pairs("jsonl", "train", path, eval_data_path=path)


def test_training_on_humaneval_warns_that_it_is_the_evaluation_set(caplog):
    with caplog.at_level(logging.WARNING):
        tasks = train_code_tasks(data_args(data_name="humaneval", max_train_samples=3))
    assert len(tasks) == 3 and "training on HumanEval's test split, the evaluation set" in caplog.text
