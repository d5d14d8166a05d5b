"""The study's unseen seeds (evaluation.study): runs of a (task, arm, seed) no committed row has, made on another
machine kind, are filed in ``unseen_seeds.jsonl`` beside ``runs.jsonl``, never in it; the report checks each against
its arm's published interval of a new PPO seed, estimated from the committed rows only, by hand; and the committed
report's section recomputed from ``docs/study`` with independent code."""
import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats

from dschat.core.machine import machine_line
from evaluation.study.design import MODEL_SEED_PAIRS
from evaluation.study.summaries import merge_unseen
from evaluation.study.tables import unseen_seed_lines

ROOT = Path(__file__).resolve().parents[1]
XEON = {"cpu": "Intel(R) Xeon(R) Processor", "isa": "AVX512", "gpu": None, "threads": 2, "cores": 2,
        "torch": "2.13.0+cpu", "transformers": "5.19.0", "vllm": None, "deepspeed": "0.19.8"}
META = {"machines": [{"commits": ["c"], "known": "the exploration's machine: not recorded; one kind by its bits"}]}


def run(arm, seed, gold, task="long", machine=None, step0=0.068):
    found = {"task": task, "arm": arm, "seed": seed, "steps": [0, 24, 48], "gold": [step0, 0.1, gold],
             "rm": [2.5, 3.0, 4.0], "length": [116, 110, 100.0], "cpu_s": 100.0, "commit": "c"}
    return {**found, "machine": machine} if machine else found


def t_prediction(values):
    """Student's t prediction interval of one further value (s·√(1 + 1/n)), by hand."""
    n = len(values)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) * math.sqrt(1 + 1 / n)
    return statistics.fmean(values) - half, statistics.fmean(values) + half


def test_unseen_seeds_are_filed_beside_the_committed_rows_never_in_them():
    committed = [run("ppo", 1, 0.12), run("ppo", 2, 0.11)]
    fresh = run("ppo", 17, 0.13, machine=XEON)
    filed = merge_unseen(committed, [], [fresh])
    assert filed == [fresh]
    assert merge_unseen(committed, filed, [fresh]) == filed  # the same run filed again: once
    with pytest.raises(ValueError, match="long/ppo/2 is a committed row of runs.jsonl"):
        merge_unseen(committed, [], [run("ppo", 2, 0.11, machine=XEON)])
    with pytest.raises(ValueError, match="long/ppo/18 does not record its machine"):
        merge_unseen(committed, [], [run("ppo", 18, 0.13)])
    with pytest.raises(ValueError, match="long/ppo/17 is filed already with other numbers"):
        merge_unseen(committed, filed, [run("ppo", 17, 0.14, machine=XEON)])
    more = run("mappo", 17, 0.15, machine=XEON, task="short")
    assert [(r["task"], r["arm"]) for r in merge_unseen(committed, filed, [more])] == [("long", "ppo"),
                                                                                       ("short", "mappo")]


# committed: PPO and MA-PPO on seeds 1-4; the pre-registered pair on seeds 9-12 of SFT + RM seeds 1234 and 2 (so
# "Where a new seed would land" publishes its intervals); MA-PPO λ = 0.99 on seeds 9-12 only (no seed shared with
# PPO: this section publishes its interval); the short task's PPO on seeds 1-3. Unseen: seed 17 of each, on XEON.
BASE, METHOD = MODEL_SEED_PAIRS["long"][0]
FINALS = {("long", "ppo"): {1: 0.110, 2: 0.120, 3: 0.115, 4: 0.118},
          ("long", "mappo"): {1: 0.140, 2: 0.150, 3: 0.145, 4: 0.148},
          ("long", BASE): {9: 0.140, 10: 0.150, 11: 0.145, 12: 0.135},
          ("long", METHOD): {9: 0.155, 10: 0.150, 11: 0.140, 12: 0.160},
          ("long-sftrm2", BASE): {9: 0.120, 10: 0.125, 11: 0.118, 12: 0.119},
          ("long-sftrm2", METHOD): {9: 0.121, 10: 0.119, 11: 0.130, 12: 0.126},
          ("long", "mappo-lam0.99"): {9: 0.150, 10: 0.141, 11: 0.152, 12: 0.146},
          ("short", "ppo"): {1: 0.170, 2: 0.180, 3: 0.176}}
COMMITTED = [run(arm, seed, gold, task) for (task, arm), finals in FINALS.items() for seed, gold in finals.items()]
UNSEEN = {("long", "ppo"): 0.116, ("long", "mappo"): 0.190, ("long", BASE): 0.150, ("long", METHOD): 0.170,
          ("long", "mappo-lam0.99"): 0.149, ("short", "ppo"): 0.150}
UNSEEN_ROWS = [run(arm, 17, gold, task, machine=XEON, step0=0.070) for (task, arm), gold in UNSEEN.items()]


def test_each_unseen_seed_against_its_arms_published_interval_by_hand():
    """The interval is the one the report publishes for the arm, from the committed rows alone (the unseen seed in
    it would move it): the pair's arms from "Where a new seed would land" (their seeds on SFT + RM seed 1234), PPO
    and MA-PPO from the core table (seeds shared with PPO), MA-PPO λ = 0.99 from all its seeds; inside or not, the
    count, and the machines."""
    text = "\n".join(unseen_seed_lines(COMMITTED, UNSEEN_ROWS, META))
    pair, core = "\"Where a new seed would land\"", "the core arms' table's *new seed*"
    where = {("long", BASE): pair, ("long", METHOD): pair, ("long", "mappo-lam0.99"): "this section"}
    inside, residuals = 0, []
    for key, gold in UNSEEN.items():
        low, high = t_prediction(list(FINALS[key].values()))
        ok = low <= gold <= high
        inside += ok
        seeds = sorted(FINALS[key])
        values = list(FINALS[key].values())
        residual = (gold - statistics.fmean(values)) / (statistics.stdev(values) * math.sqrt(1 + 1 / len(values)))
        residuals.append(residual)
        assert (f"| {key[0]} | {key[1]} | 17 | [{low:.3f}, {high:.3f}] ("
                f"{where.get(key, core)}; seeds {seeds[0]}-{seeds[-1]}; the exploration's machine (not recorded)) | "
                f"{gold:.4f} | "
                f"{'yes' if ok else 'no'} | {residual:+.2f} | no | 0.07000; 0.06800 |") in text
    assert 0 < inside < len(UNSEEN)  # both outcomes occur in this fixture
    assert f"**{inside} of {len(UNSEEN)} land inside** (0 failed: none)" in text
    below = sum(r < 0 for r in residuals)
    assert (f"{below} of {len(UNSEEN)} fall below their interval's centre (mean standardised residual "
            f"{statistics.fmean(residuals):+.2f})") in text
    assert (f"made on {machine_line(XEON)}, whose final gold is set against the arm's published new-seed interval, "
            "estimated on the committed runs made on the exploration's machine (not recorded)") in text
    assert f"equals the committed runs' bit for bit on 0 of {len(UNSEEN)} rows" in text
    same = [*UNSEEN_ROWS[:-1], run("ppo", 17, 0.150, "short", machine=XEON, step0=0.068)]  # the committed step 0
    assert f"bit for bit on 1 of {len(UNSEEN)} rows" in "\n".join(unseen_seed_lines(COMMITTED, same, META))
    # a failed unseen run (ended collapsed) is counted as failed, inside or not
    collapsed = [{**r, "length": [*r["length"][:-1], 10.0]} if r["arm"] == "mappo-lam0.99" else r for r in UNSEEN_ROWS]
    text = "\n".join(unseen_seed_lines(COMMITTED, collapsed, META))
    assert "(1 failed: long/mappo-lam0.99 (collapsed, inside))" in text


def test_no_unseen_seed_no_section():
    assert unseen_seed_lines(COMMITTED, [], META) == []


def test_the_runner_files_unseen_seeds_beside_the_committed_rows_and_refuses_committed_ones(tmp_path, monkeypatch,
                                                                                           capsys):
    """``unseen`` files OUT's runs in unseen_seeds.jsonl (runs.jsonl untouched) and stops with a one-line error on a
    run whose task, arm and seed runs.jsonl holds."""
    from evaluation.study import report, runner

    out, report_dir = tmp_path / "out", tmp_path / "docs"
    directory = out / "long" / "ppo" / "seed17"
    directory.mkdir(parents=True)
    (directory / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "eval/score": 3.0 + step / 100, "eval/gold": 0.1 + step / 1000,
                    "eval/response_length": 100.0}) + "\n" for step in (0, 12)))
    (directory / runner.MARKER).write_text(json.dumps(
        {"task": "long", "arm": "ppo", "seed": 17, "wall_s": 1.0, "cpu_s": 1.0, "commit": "c", "machine": XEON,
         "finished": "2026-11-27 17:40:00"}))
    report_dir.mkdir()
    rendered = []
    monkeypatch.setattr(report, "render", lambda summaries, where: rendered.append(len(summaries)))
    with pytest.raises(SystemExit) as stop:
        runner.main(["unseen", "--out", str(out), "--report_dir", str(report_dir)])
    assert stop.value.code == 2 and "runs.jsonl: no such file" in capsys.readouterr().err
    rows = "".join(json.dumps(r) + "\n" for r in COMMITTED)
    (report_dir / "runs.jsonl").write_text(rows)
    runner.main(["unseen", "--out", str(out), "--report_dir", str(report_dir)])
    (filed,) = [json.loads(line) for line in (report_dir / "unseen_seeds.jsonl").read_text().splitlines()]
    assert (filed["arm"], filed["seed"], filed["gold"], filed["machine"]) == ("ppo", 17, [0.1, 0.112], XEON)
    assert (report_dir / "runs.jsonl").read_text() == rows and rendered == [len(COMMITTED)]
    (report_dir / "runs.jsonl").write_text(rows + json.dumps({**filed, "machine": None}) + "\n")
    with pytest.raises(SystemExit) as stop:
        runner.main(["unseen", "--out", str(out), "--report_dir", str(report_dir)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "long/ppo/17 is a committed row" in err


# ---- the committed study, recomputed with independent code ----


def committed(name):
    path = ROOT / "docs/study" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def pair_seeds(runs):
    """Per task of the long task's SFT + RM seeds, the PPO seeds both arms of the pre-registered pair share."""
    found = {}
    for r in runs:
        if r["task"].startswith("long") and r["arm"] in (BASE, METHOD):
            found.setdefault(r["task"], {}).setdefault(r["arm"], set()).add(r["seed"])
    return {task: sorted(arms.get(BASE, set()) & arms.get(METHOD, set())) for task, arms in found.items()}


def test_the_committed_unseen_seeds_recompute_from_the_jsonl_files():
    """Each row of ``unseen_seeds.jsonl`` is a (task, arm, seed) runs.jsonl lacks, with its machine; the report prints
    its final gold against the arm's interval recomputed here from runs.jsonl alone (the pair's arms: the seeds both
    share on the long task; other arms: the seeds they share with PPO, else all theirs), inside or not, and the
    count. Without the file the report has no such section."""
    runs, unseen = committed("runs.jsonl"), committed("unseen_seeds.jsonl")
    report = (ROOT / "docs/study/README.md").read_text()
    assert ("#### Unseen seeds of every published arm" in report) == bool(unseen)
    keys = {(r["task"], r["arm"], r["seed"]) for r in runs}
    inside = 0
    for row in unseen:
        assert (row["task"], row["arm"], row["seed"]) not in keys and row["machine"]
        finals = {(r["arm"], r["seed"]): r["gold"][-1] for r in runs if r["task"] == row["task"]}
        own = {s for a, s in finals if a == row["arm"]}
        if row["task"] == "long" and row["arm"] in (BASE, METHOD):  # as many as every SFT + RM seed has
            seeds = sorted({s for a, s in finals if a == BASE} & {s for a, s in finals if a == METHOD})
            seeds = seeds[:min(len(found) for found in pair_seeds(runs).values() if len(found) >= 2)]
        else:
            seeds = sorted(own & {s for a, s in finals if a == "ppo"})
            seeds = seeds if len(seeds) >= 2 else sorted(own)
        low, high = t_prediction([finals[row["arm"], s] for s in seeds])
        gold = row["gold"][-1]
        inside += low <= gold <= high
        assert (f"| {row['task']} | {row['arm']} | {row['seed']} | [{low:.3f}, {high:.3f}] (") in report
        assert f"| {gold:.4f} | {'yes' if low <= gold <= high else 'no'} |" in report
    if unseen:
        assert f"**{inside} of {len(unseen)} land inside** (" in report
