"""Every evaluation entry point given a missing file ends in one line (``error: ...``, exit 2, naming the file),
run as ``python -m evaluation.<module>`` runs it (runpy, in this process), and creates no output folder."""
import runpy
import sys

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy of an imported module
MISSING = "/nonexistent/marlhf"
CASES = {
    "agreement": ["--rm_a", f"{MISSING}/a.jsonl", "--rm_b", f"{MISSING}/b.jsonl"],
    "best_of_n": ["--policy", f"sft={MISSING}/policy", "--reward_model", f"{MISSING}/rm", "--output_dir", "{out}"],
    "curves": ["--run", f"ppo={MISSING}/run", "--out", "{out}/c.png"],
    "judge": ["--task", "tldr", "--a", f"{MISSING}/a.jsonl", "--b", f"{MISSING}/b.jsonl", "--base_url", "x",
              "--summary", "{out}/s.json"],
    "length_debias": ["--scores", f"a={MISSING}/a.jsonl"],
    "paper_numbers": ["table2", "--result", f"tldr:ppo={MISSING}/run"],
    "pass_at_k": ["--samples", f"{MISSING}/samples.jsonl", "--details", "{out}/d.jsonl"],
    "pipeline_record": ["table", f"{MISSING}/record.json"],
    "plots": ["distributions", "--scores", f"a={MISSING}/a.jsonl", "--out", "{out}/d.png"],
    "rm_interop": ["--reward_model", f"{MISSING}/rm"],
    "rm_score": ["--policy", f"a={MISSING}/policy", "--reward_model", f"{MISSING}/rm", "--output_dir", "{out}"],
    "training_summary": [f"{MISSING}/run"],
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_a_missing_file_is_one_line(module, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    argv = [arg.replace("{out}", str(out)) for arg in CASES[module]]
    monkeypatch.setattr(sys, "argv", [f"evaluation/{module}.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module(f"evaluation.{module}", run_name="__main__")
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert MISSING in err[0] and not out.exists()


def test_pass_at_k_rows_without_task_id_are_one_line_before_any_program_runs(tmp_path, monkeypatch, capsys):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"completion": "print(1)"}\n')
    monkeypatch.setattr(sys, "argv", ["evaluation/pass_at_k.py", "--samples", str(samples), "--details",
                                      str(tmp_path / "out" / "d.jsonl")])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("evaluation.pass_at_k", run_name="__main__")
    assert exit_info.value.code == 2 and not (tmp_path / "out").exists()
    assert capsys.readouterr().err == f"error: {samples}, line 1: needs a string task_id and a string completion\n"
