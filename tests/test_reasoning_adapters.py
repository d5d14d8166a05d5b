"""GSM8K and MATH adapters on the rows the project ships (``tests/fixtures/data/hub``, each in its hub layout and
schema): the exact pairs, the hub path through an offline HF cache at the pinned commits, the one-line errors of a
row without an answer and of a hub that cannot be reached, and the verifier judging the references."""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dschat.data import DataError, PreferencePair, load_pairs
from dschat.data.adapters import gsm8k, hendrycks_math
from dschat.data.registry import answer_task_of
from dschat.rewards import verify_answer

HUB = Path(__file__).parent / "fixtures" / "data" / "hub"
SOURCES = [gsm8k.SOURCE, hendrycks_math.SOURCES[0]]


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An offline HF cache holding both repositories as the snapshot of their pinned commits."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hf-cache"
    for source in SOURCES:
        owner, name = source.repo.split("/")
        shutil.copytree(HUB / source.repo, cache / f"datasets--{owner}--{name}" / "snapshots" / source.revision)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_gsm8k_rows_become_question_prompts_and_solutions_ending_in_the_answer_line():
    train = load_pairs("gsm8k", "train", str(HUB / "openai/gsm8k"))
    assert train == [
        PreferencePair(prompt="Question: Mia bakes 12 muffins and gives away a third of them. How many muffins does "
                              "she keep?\nSolution:",
                       chosen=" She gives away 12/3 = 4 muffins.\nShe keeps 12-4 = 8 muffins.\nAnswer: 8"),
        PreferencePair(prompt="Question: A pen costs $1.50. How much do 800 pens cost?\nSolution:",
                       chosen=" 800 pens cost 800*1.5 = 1200 dollars.\nAnswer: 1,200"),
    ]
    validation = load_pairs("gsm8k", "validation", str(HUB / "openai/gsm8k"))
    assert [p.chosen.rsplit("\n", 1)[1] for p in validation] == ["Answer: 30", "Answer: 3.5"]
    assert answer_task_of("gsm8k") == "gsm8k" and answer_task_of("math") == "math"


def test_math_reads_every_subject_and_keeps_the_boxed_solution():
    pairs = load_pairs("math", "test", str(HUB / "EleutherAI/hendrycks_math"))
    assert [p.prompt.split(" problem")[0] for p in pairs] == [f"Problem: {s}" for s in hendrycks_math.SUBJECTS]
    assert pairs[0] == PreferencePair(prompt="Problem: algebra problem 0 (test): what is the answer?\nSolution:",
                                      chosen=" We work it out. The answer is $\\boxed{\\frac{1}{2}}$.")
    assert len(load_pairs("math", "train", str(HUB / "EleutherAI/hendrycks_math"))) == 7


@pytest.mark.parametrize("name, repo, expected", [("gsm8k", "openai/gsm8k", 2),
                                                  ("math", "EleutherAI/hendrycks_math", 7)])
def test_hub_path_reads_the_pinned_files_like_the_local_mirror(hf_cache, name, repo, expected):
    for split in ("train", "validation"):
        from_hub = load_pairs(name, split)
        assert from_hub == load_pairs(name, split, str(HUB / repo)) and len(from_hub) == expected


def test_offline_without_the_files_is_one_clear_line(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for name, repo in (("gsm8k", "openai/gsm8k"), ("math", "EleutherAI/hendrycks_math")):
        with pytest.raises(DataError) as error:
            load_pairs(name, "train")
        message = str(error.value)
        assert "\n" not in message and repo in message and "cannot reach the hub" in message
        assert "--data_path" in message


def write_rows(path: Path, rows: list) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path.parent)


def test_a_row_without_an_answer_is_a_one_line_error_naming_it(tmp_path):
    folder = write_rows(tmp_path / "g" / "train.parquet", [{"question": "q1", "answer": "1+1=2\n#### 2"},
                                                           {"question": "q2", "answer": "so it is 3"}])
    with pytest.raises(DataError, match=r"train.parquet, row 2: the answer has no final '#### <answer>' line"):
        load_pairs("gsm8k", "train", folder)
    write_rows(tmp_path / "m" / "algebra" / "train-00000-of-00001.parquet",
               [{"problem": "p", "level": "Level 1", "type": "Algebra", "solution": "It is 3."}])
    with pytest.raises(DataError, match=r"train-00000-of-00001.parquet, row 1: the solution has no \\boxed"):
        load_pairs("math", "train", str(tmp_path / "m"))


def test_the_verifier_accepts_each_shipped_reference_and_rejects_a_wrong_answer():
    for name, repo, wrong in (("gsm8k", "openai/gsm8k", "Answer: 999"),
                              ("math", "EleutherAI/hendrycks_math", "$\\boxed{999}$")):
        for split in ("train", "validation"):
            for pair in load_pairs(name, split, str(HUB / repo)):
                assert verify_answer(pair.chosen, pair.chosen, name)
                assert not verify_answer(wrong, pair.chosen, name)
    gsm = load_pairs("gsm8k", "validation", str(HUB / "openai/gsm8k"))
    assert verify_answer("So the answer is $\\frac{7}{2}$.", gsm[1].chosen, "gsm8k")
    assert verify_answer("Answer: 1200", load_pairs("gsm8k", "train", str(HUB / "openai/gsm8k"))[1].chosen, "gsm8k")
