"""The SFT / RM / PPO split: disjoint, complete, proportional, seeded, stable across calls and processes."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dschat.data import load_code_tasks, pairs_for_phase, phase_indices, phase_split
from dschat.data.phase_split import cache_file, phase_sizes

FIXTURES = Path(__file__).parent / "fixtures" / "data"


def all_phases(n, data_split="2,4,4", seed=1234, **kwargs):
    return [phase_indices(n, data_split, phase, seed, **kwargs) for phase in range(3)]


@pytest.mark.parametrize("n", [0, 1, 7, 10, 1001, 6000])
def test_disjoint_and_complete(n):
    parts = all_phases(n)
    joined = np.concatenate(parts)
    assert len(joined) == n and sorted(joined.tolist()) == list(range(n))


def test_paper_proportions():
    assert [len(part) for part in all_phases(6000)] == [1200, 2400, 2400]
    assert [len(part) for part in all_phases(1000, "2,0,8")] == [200, 0, 800]
    assert [len(part) for part in all_phases(10, "0.2,0.4,0.4")] == [2, 4, 4]


def test_sizes_round_by_largest_remainder():
    assert phase_sizes(7, [2, 4, 4]) == [1, 3, 3]
    assert phase_sizes(11, [1, 1, 1]) == [4, 4, 3]
    assert sum(phase_sizes(12345, [2, 4, 4])) == 12345


def test_seeded_and_stable_across_calls():
    assert all(np.array_equal(a, b) for a, b in zip(all_phases(500), all_phases(500)))
    assert not np.array_equal(phase_indices(500, "2,4,4", 0, seed=1), phase_indices(500, "2,4,4", 0, seed=2))


def test_stable_across_processes():
    code = ("from dschat.data.phase_split import phase_indices; "
            "print(phase_indices(300, '2,4,4', 1, 1234).tolist())")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(output) == phase_indices(300, "2,4,4", 1, 1234).tolist()


def test_cache_file_is_written_keyed_and_reused(tmp_path, caplog):
    parts = all_phases(50, cache_dir=tmp_path, dataset_name="openai/summarize_from_feedback")
    path = cache_file(tmp_path, "openai/summarize_from_feedback", 50, [2, 4, 4], 1234)
    assert path.name == "openai_summarize_from_feedback_n50_split2-4-4_seed1234.npy"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    stored = np.load(path)
    assert [np.flatnonzero(stored == phase).tolist() for phase in range(3)] == [p.tolist() for p in parts]
    np.save(path, np.zeros(50, dtype=np.int8))
    repaired = phase_indices(50, "2,4,4", 0, 1234, cache_dir=tmp_path, dataset_name="openai/summarize_from_feedback")
    assert np.array_equal(repaired, parts[0]) and "rewriting it" in caplog.text
    assert np.array_equal(np.load(path), stored)


def test_phase_split_keeps_items_in_order():
    items = [f"item{k}" for k in range(20)]
    selected = phase_split(items, "1,1,2", 2)
    assert len(selected) == 10 and selected == sorted(selected, key=items.index)


def test_pairs_for_phase_splits_train_and_keeps_validation_whole(tmp_path):
    parts = [pairs_for_phase("synthetic", phase, cache_dir=tmp_path) for phase in range(3)]
    assert [len(part) for part in parts] == [1200, 2400, 2400]
    prompts_and_chosen = [{(p.prompt, p.chosen, p.rejected) for p in part} for part in parts]
    assert not (prompts_and_chosen[0] & prompts_and_chosen[1]) and not (prompts_and_chosen[1] & prompts_and_chosen[2])
    assert len(pairs_for_phase("synthetic", 1, split="validation")) == 400


def test_apps_sft_pairs_come_from_sft_problems_only(tmp_path):
    rows = [json.loads(line) for line in (FIXTURES / "apps.jsonl").read_text().splitlines()]
    many = []
    for copy in range(10):
        for row in rows:
            many.append(dict(row, problem_id=row["problem_id"] * 100 + copy, question=f"{row['question']} #{copy}"))
    path = tmp_path / "apps.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in many))
    ppo_tasks = phase_split(load_code_tasks("apps", "train", path), "2,0,8", 2)
    sft_pairs = pairs_for_phase("apps", 0, "2,0,8", data_path=path)
    assert sft_pairs and ppo_tasks
    assert not {pair.prompt for pair in sft_pairs} & {task.prompt for task in ppo_tasks}
