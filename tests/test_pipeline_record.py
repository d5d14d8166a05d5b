"""Pipeline records (``evaluation.pipeline_record``): what ``demo.sh`` and ``smollm2_cpu.sh`` record of their
stages, and the README / docs tables rendered from the committed records, so the pipelines' quoted figures cannot drift."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.stats
import yaml

from evaluation.pipeline_record import RecordError, collect, compare, readme_table

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = {"demo": ("sft", "rm", "ppo", "mappo"),
             "smollm2": ("sft", "rm", "ppo-s1", "mappo-s1", "ppo-s2", "mappo-s2", "ppo-s3", "mappo-s3", "ppo-s4",
                         "mappo-s4")}
"""docs/<name>/record.json -> the stages its script records, in order."""
QUOTED_IN = {"demo": "README.md", "smollm2": "docs/pretrained-model.md"}
"""docs/<name>/record.json -> the page that quotes its table."""


def write_stage(out: Path, name: str, evals: list, commit: str = "a" * 40, dirty: bool = False,
                finished: bool = True, machine: dict = None) -> None:
    stage = out / name
    stage.mkdir(parents=True)
    lines = [{"step": 1, "loss": 0.5}]  # a training record: no eval/* key
    lines += [{"step": step, **{f"eval/{k}": v for k, v in values.items()}} for step, values in evals]
    (stage / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = {"stage": name, "finished": "2026-01-01T00:00:00+00:00" if finished else None,
              "git": {"commit": commit, "dirty": dirty}, **({"machine": machine} if machine else {})}
    (stage / "run_config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture
def pipeline(tmp_path):
    write_stage(tmp_path, "sft", [(0, {"perplexity": 82.7}), (40, {"perplexity": 4.513})])
    write_stage(tmp_path, "rm", [(0, {"accuracy": 0.479}), (16, {"accuracy": 0.7}), (32, {"accuracy": 0.896})])
    write_stage(tmp_path, "ppo", [(0, {"score": 2.485, "gold": 0.09996, "response_length": 15.0}),
                                  (12, {"score": 4.9, "gold": 0.171, "response_length": 14.0})])
    (tmp_path / "times.txt").write_text("convert wall_s=3 cpu_s=2\nsft wall_s=206 cpu_s=286\nrm wall_s=358 cpu_s=354\n"
                                        "ppo wall_s=700 cpu_s=650\ntotal wall_s=1267 cpu_s=1292\n")
    report = {"project": {"accuracy": 0.92, "agreement": 1.0, "max_abs_diff": 0.0},
              "trl_grpo_text": {"accuracy": 0.3, "agreement": 0.32, "max_abs_diff": 5.804}}
    (tmp_path / "interop.txt").write_text("100 held-out pairs, out/rm\nconvention  accuracy\n"
                                          f"{json.dumps(report)}\ninterop wall_s=764 cpu_s=618\n")
    return tmp_path


def test_record_holds_each_stage_as_its_files_say(pipeline):
    record = collect(str(pipeline), ["sft", "rm", "ppo"])
    assert list(record["stages"]) == ["sft", "rm", "ppo"]
    rm = record["stages"]["rm"]
    assert rm["first"] == {"step": 0, "eval/accuracy": 0.479} and rm["last"] == {"step": 32, "eval/accuracy": 0.896}
    assert (rm["wall_s"], rm["cpu_s"], rm["commit"], rm["dirty"], rm["finished"]) == (358, 354, "a" * 40, False, True)
    assert record["other_times"] == {"convert": {"wall_s": 3, "cpu_s": 2}, "total": {"wall_s": 1267, "cpu_s": 1292}}
    assert record["interop"]["pairs"] == 100 and record["interop"]["conventions"]["trl_grpo_text"]["agreement"] == 0.32


def test_table_quotes_the_recorded_figures(pipeline):
    table = readme_table(collect(str(pipeline), ["sft", "rm", "ppo"]))
    assert "| sft | response perplexity 82.7 → 4.51 (step 0 → 40) | 206 | 286 | `aaaaaaaaaaaa` |" in table
    assert "| rm | pair accuracy 0.479 → 0.896 (step 0 → 32) | 358 | 354 | `aaaaaaaaaaaa` |" in table
    assert "| ppo | RM score 2.48 → 4.9; gold score 0.1 → 0.171 (step 0 → 12) | 700 | 650 | `aaaaaaaaaaaa` |" in table
    assert "| `trl_grpo_text` | 0.300 | 0.320 | 5.8 |" in table
    assert any(line.startswith("| RM scoring convention (100 held-out pairs)") for line in table)


def test_seeded_arms_are_summarised_and_paired_by_seed(tmp_path):
    golds = {"ppo": [0.10, 0.14, 0.12], "mappo": [0.13, 0.13, 0.17]}
    for arm, values in golds.items():
        for seed, gold in enumerate(values, 1):
            write_stage(tmp_path, f"{arm}-s{seed}", [(0, {"gold": 0.05}), (12, {"gold": gold})])
    table = readme_table(collect(str(tmp_path), [f"{arm}-s{k}" for k in (1, 2, 3) for arm in golds]))
    diffs = [m - b for b, m in zip(golds["ppo"], golds["mappo"])]  # 0.03, -0.01, 0.05
    half = scipy.stats.t.ppf(0.975, 2) * statistics.stdev(diffs) / 3 ** 0.5
    mean = statistics.fmean(diffs)
    assert f"| mappo − ppo, paired by seed (3) | {mean:.3f} [{mean - half:.3f}, {mean + half:.3f}], ahead 2/3 |" in table
    assert "| ppo (3) | 0.120 [" in "\n".join(table) and "| mappo (3) | 0.143 [" in "\n".join(table)


def test_dirty_and_unknown_commits_are_marked(tmp_path):
    write_stage(tmp_path, "sft", [(0, {"perplexity": 9.0}), (4, {"perplexity": 3.0})], dirty=True)
    (row,) = readme_table(collect(str(tmp_path), ["sft"]))[2:]
    assert row.endswith("| — | — | `aaaaaaaaaaaa+dirty` |")


def test_a_stage_without_output_is_one_line(pipeline, tmp_path):
    with pytest.raises(RecordError, match=r"mappo: no such stage output directory"):
        collect(str(pipeline), ["sft", "mappo"])
    write_stage(tmp_path / "x", "sft", [])
    with pytest.raises(RecordError, match="no evaluation logged"):
        collect(str(tmp_path / "x"), ["sft"])
    (tmp_path / "x" / "sft" / "metrics.jsonl").unlink()
    with pytest.raises(RecordError, match="sft/metrics.jsonl: no metrics log"):
        collect(str(tmp_path / "x"), ["sft"])
    result = subprocess.run([sys.executable, "-m", "evaluation.pipeline_record", "collect", str(pipeline), "nope"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "nope: no such stage" in result.stderr


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_readme_quotes_the_committed_record(name):
    """The table a page quotes for a pipeline is the committed record's, from finished stages of one clean commit."""
    record = json.loads((ROOT / "docs" / name / "record.json").read_text())
    assert tuple(record["stages"]) == COMMITTED[name]
    stages = record["stages"].values()
    assert all(stage["finished"] for stage in stages)
    assert len({(stage["commit"], stage["dirty"]) for stage in stages}) == 1
    assert not next(iter(stages))["dirty"]
    assert "\n".join(readme_table(record)) in (ROOT / QUOTED_IN[name]).read_text()


XEON = {"cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "isa": "AVX512", "gpu": None, "threads": 1,
        "cores": 2, "torch": "2.9.0", "transformers": "4.57.1", "vllm": None, "deepspeed": "0.18.0"}
EPYC = {**XEON, "cpu": "AMD EPYC 9B14"}


def machine_pipeline(out: Path, machine: dict, sft_ppl: float, machines=None) -> dict:
    for name, ppl in (("sft", sft_ppl), ("ppo", None)):
        evals = [(0, {"perplexity": 600.0}), (40, {"perplexity": ppl})] if ppl else [(0, {"gold": 0.08}),
                                                                                     (60, {"gold": 0.137})]
        write_stage(out, name, evals, machine=(machines or {}).get(name, machine))
    return collect(str(out), ["sft", "ppo"])


def test_a_record_names_its_machine_and_its_table_says_it(tmp_path):
    record = machine_pipeline(tmp_path, XEON, 4.84)
    assert record["machine"] == XEON
    table = readme_table(record)
    assert table[0] == ("machine: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (AVX512), 1 thread(s); torch 2.9.0, "
                        "transformers 4.57.1, deepspeed 0.18.0") and table[1] == ""
    with pytest.raises(RecordError, match="ppo ran on another machine than sft"):
        machine_pipeline(tmp_path / "mixed", XEON, 4.84, machines={"ppo": EPYC})


def test_compare_tells_another_machines_bits_from_a_real_change(tmp_path):
    """The issue's case: the demo on an AMD EPYC gave SFT perplexity 5.67 against the record's 4.84."""
    reference = machine_pipeline(tmp_path / "ref", XEON, 4.84)
    same = compare(machine_pipeline(tmp_path / "same", XEON, 4.84), reference)
    assert same[-1] == "same figures as the record (2 compared, bit for bit)"
    other = compare(machine_pipeline(tmp_path / "epyc", EPYC, 5.67), reference)
    assert "sft response perplexity" in other[1] and other[1].endswith("  *") and not other[2].endswith("*")
    assert other[-1].startswith("1 of 2 figures differ (*): another kind of machine")
    assert "AMD EPYC 9B14" in other[-3] and "Xeon" in other[-2]
    changed = compare(machine_pipeline(tmp_path / "change", XEON, 5.0), reference)
    assert "the same kind of machine gives other figures: a real change" in changed[-1]
    unknown = dict(reference)
    del unknown["machine"]
    assert "cannot tell" in compare(machine_pipeline(tmp_path / "again", EPYC, 5.67), unknown)[-1]
