"""The study's machine component and its SFT + RM seeds (evaluation.study): reruns of committed runs on another
machine kind are filed beside ``runs.jsonl``, never in place of its rows; their per-seed differences, bits, and the
intervals with the machine kind in them, by hand; the SFT + RM seeds made on another machine kind against the
intervals estimated without them, by hand; and the committed report's numbers recomputed from ``docs/study`` with
independent code."""
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dschat.core.machine import machine_line
from evaluation.study.decisions import new_machine_checks, rerun_pairs
from evaluation.study.design import MODEL_SEED_PAIRS, MODEL_SEED_TASKS, TASKS
from evaluation.study.findings import headline, machine_bullet
from evaluation.study.summaries import merge_reruns, merge_runs, other_machine_runs
from evaluation.study.tables import machine_component_lines

ROOT = Path(__file__).resolve().parents[1]
STEPS = [0, 12, 24, 36, 48]
XEON = {"cpu": "Intel(R) Xeon(R) Processor", "isa": "AVX512", "gpu": None, "threads": 2, "cores": 2,
        "torch": "2.13.0+cpu", "transformers": "5.19.0", "vllm": None, "deepspeed": "0.19.8"}
OTHER = {**XEON, "cpu": "AMD EPYC", "isa": "AVX2"}
META = {"machines": [{"commits": ["c"], "known": "the confirmation's machine: not recorded; one kind by its bits"}]}


def run(arm, seed, gold, task="long", machine=None, curve=(0.07, 0.1, 0.1, 0.1)):
    found = {"task": task, "arm": arm, "seed": seed, "steps": STEPS, "gold": [*curve, gold],
             "rm": [2.5, 3, 3, 3, 4.0], "length": [116, 110, 108, 106, 100.0], "cpu_s": 100.0, "commit": "c"}
    return {**found, "machine": machine} if machine else found


def test_a_rerun_on_another_machine_never_replaces_or_duplicates_a_committed_row():
    committed = [run("ppo-lam1", 9, 0.15), run("ppo-lam1", 10, 0.14, machine=XEON)]
    rerun = run("ppo-lam1", 9, 0.13, machine=XEON)
    assert other_machine_runs(committed, [rerun]) == [("long", "ppo-lam1", 9)]
    with pytest.raises(ValueError, match=r"first: long/ppo-lam1/9\) repeat committed runs made on another machine"):
        merge_runs(committed, [rerun])
    # the same machine kind: a remeasured run replaces its row, as before
    again = run("ppo-lam1", 10, 0.2, machine=XEON)
    assert [r["gold"][-1] for r in merge_runs(committed, [again])] == [0.15, 0.2]
    # the reruns file: only runs repeating committed rows from another machine, one per (task, arm, seed, machine)
    fresh = [rerun, again, run("mappo-lam1", 9, 0.2, machine=XEON)]  # the last repeats no committed run
    reruns = merge_reruns(committed, [], fresh)
    assert [(r["arm"], r["seed"], r["gold"][-1]) for r in reruns] == [("ppo-lam1", 9, 0.13)]
    assert merge_reruns(committed, reruns, [rerun]) == reruns  # filed again: not twice
    third = run("ppo-lam1", 9, 0.16, machine=OTHER)
    assert [r["gold"][-1] for r in merge_reruns(committed, reruns, [third])] == [0.16, 0.13]  # by machine line
    assert machine_line(OTHER) < machine_line(XEON)


# the pre-registered pair's committed runs on seeds 9-12 (unrecorded machine) and reruns of 9-11 on XEON; the
# rerun of token PPO's seed 9 has the committed run's bits at every evaluation, the others from step 12 on only
PPO = {9: 0.150, 10: 0.140, 11: 0.145, 12: 0.135}
MAPPO = {9: 0.155, 10: 0.150, 11: 0.140, 12: 0.150}
PPO_RERUN = {9: 0.150, 10: 0.132, 11: 0.151}
MAPPO_RERUN = {9: 0.149, 10: 0.160, 11: 0.146}
COMMITTED = [run("ppo-lam1", s, g) for s, g in PPO.items()] + [run("mappo-lam1", s, g) for s, g in MAPPO.items()]
RERUNS = ([run("ppo-lam1", s, g, machine=XEON, curve=(0.07, 0.1, 0.1, 0.1) if s == 9 else (0.07, 0.11, 0.1, 0.1))
           for s, g in PPO_RERUN.items()]
          + [run("mappo-lam1", s, g, machine=XEON, curve=(0.07, 0.12, 0.1, 0.1)) for s, g in MAPPO_RERUN.items()])


def t_prediction(values):
    """Student's t prediction interval of one further value (s·√(1 + 1/n)), by hand."""
    n = len(values)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) * math.sqrt(1 + 1 / n)
    return statistics.fmean(values) - half, statistics.fmean(values) + half


def test_the_same_seeds_on_another_machine_kind_by_hand():
    pairs = rerun_pairs(COMMITTED, RERUNS, ("ppo-lam1", "mappo-lam1"))
    assert [(c["arm"], c["seed"], r["gold"][-1]) for c, r in pairs] == [
        ("ppo-lam1", 9, 0.150), ("ppo-lam1", 10, 0.132), ("ppo-lam1", 11, 0.151),
        ("mappo-lam1", 9, 0.149), ("mappo-lam1", 10, 0.160), ("mappo-lam1", 11, 0.146)]
    text = "\n".join(machine_component_lines(COMMITTED, RERUNS, META))
    assert "| long | ppo-lam1 | 10 | 0.1400 | 0.1320 | -0.0080 | yes; no | no; no |" in text
    assert "| long | ppo-lam1 | 9 | 0.1500 | 0.1500 | +0.0000 | yes; yes | no; no |" in text
    assert "Failed runs: 0 of 6 committed, 0 of 6 reruns." in text
    diffs = [-0.006, 0.018, 0.0]  # the pair's difference, rerun − committed
    half = stats.t.ppf(0.975, 2) * statistics.stdev(diffs) / math.sqrt(3)
    assert (f"| mappo-lam1 − ppo-lam1 | 3 | {statistics.fmean(diffs):.4f} "
            f"[{statistics.fmean(diffs) - half:.4f}, {statistics.fmean(diffs) + half:.4f}] | "
            f"{statistics.stdev(diffs):.4f} | {statistics.stdev([0.005, 0.010, -0.005]):.4f} | — | — |") in text
    assert "step-0 RM (the SFT policy, the same sampling seed) 2.500 committed, 2.500 rerun." in text
    # a rerun that failed (final gold below its step 0's) is counted, and still lands inside or not as it falls
    bad = [{**r, "gold": [*r["gold"][:-1], 0.01]} if (r["arm"], r["seed"]) == ("ppo-lam1", 11) else r for r in RERUNS]
    text = "\n".join(machine_component_lines(COMMITTED, bad, META))
    assert "Failed runs: 0 of 6 committed, 1 of 6 reruns." in text and "| no; gold below step 0 |" in text


def test_reruns_against_the_published_interval_by_hand():
    """Published: the new-PPO-seed interval from the committed seeds 9-12 (the pair's seeds on SFT + RM seed 1234,
    needing a second SFT + RM seed to exist), and how many reruns land inside it, failed ones counted."""
    second = [run(a, s, g, task="long-sftrm2") for a, by in (("ppo-lam1", PPO), ("mappo-lam1", MAPPO))
              for s, g in by.items()]
    text = "\n".join(machine_component_lines(COMMITTED + second, RERUNS, META))
    low, high = t_prediction(list(PPO.values()))
    inside = sum(low <= v <= high for v in PPO_RERUN.values())
    assert f"| [{low:.3f}, {high:.3f}] (9-12) | {inside} of 3 |" in text
    differences = [MAPPO[s] - PPO[s] for s in PPO]
    low, high = t_prediction(differences)
    landed = sum(low <= MAPPO_RERUN[s] - PPO_RERUN[s] <= high for s in PPO_RERUN)
    assert f"| [{low:.3f}, {high:.3f}] (9-12) | {landed} of 3 |" in text
    bullet = machine_bullet(COMMITTED + second, RERUNS, META)
    arms = inside + sum(t_prediction(list(MAPPO.values()))[0] <= v <= t_prediction(list(MAPPO.values()))[1]
                        for v in MAPPO_RERUN.values())
    assert bullet.startswith("- **The machine component (the λ = 1 pair; exploratory by the check), what was measured: "
                             "6 same-seed reruns on another machine kind (by their bits), with the SFT and reward "
                             "model trained again there: "
                             f"{arms} of 6 land inside their arm's published new-seed interval; 0 of them failed, "
                             "against 0 of the 6 committed runs")


def test_unseen_sft_rm_seeds_on_another_machine_kind_by_hand():
    """SFT + RM seeds 1234, 2, 3 made on the unrecorded machine, 4 and 5 on XEON: the intervals of a new SFT + RM
    seed from 1234, 2, 3 alone (2 degrees of freedom), and how many of 4's and 5's runs and means land inside."""
    ppo = {"long": (0.14, 0.16), "long-sftrm2": (0.12, 0.12), "long-sftrm3": (0.10, 0.12),
           "long-sftrm4": (0.30, 0.13), "long-sftrm5": (0.11, 0.13)}
    gap = {"long": 0.01, "long-sftrm2": 0.0, "long-sftrm3": 0.02, "long-sftrm4": 0.01, "long-sftrm5": -0.2}
    summaries = []
    for task, finals in ppo.items():
        machine = XEON if task in ("long-sftrm4", "long-sftrm5") else None
        for seed, gold in zip((9, 10), finals):
            summaries += [run("ppo-lam1", seed, gold, task=task, machine=machine),
                          run("mappo-lam1", seed, gold + gap[task] + seed / 1000, task=task, machine=machine)]
    (check,) = new_machine_checks(summaries, META)
    assert (check.estimated, check.checked, check.machine) == ((1234, 2, 3), (4, 5), machine_line(XEON))
    assert check.home == "the confirmation's machine (not recorded)"
    means = [0.15, 0.12, 0.11]  # token PPO's, on 1234, 2, 3
    t = stats.t.ppf(0.975, 2)
    within = statistics.fmean([statistics.variance(v) for v in ([0.14, 0.16], [0.12, 0.12], [0.10, 0.12])])
    half_run = t * math.sqrt(statistics.variance(means) * (1 + 1 / 3) + within * (1 - 1 / 2))
    fitted, values, found_means, failed = check.values["ppo-lam1"]
    assert (fitted.run_low, fitted.run_high) == pytest.approx((statistics.fmean(means) - half_run,
                                                               statistics.fmean(means) + half_run))
    assert values == [0.30, 0.13, 0.11, 0.13] and found_means == pytest.approx({4: 0.215, 5: 0.12})
    assert failed == [False] * 4
    # a further run on 4 is checked too; the intervals and 4's mean (over the first 2 PPO seeds) stay as they are
    further = [run(arm, 11, 0.5, task="long-sftrm4", machine=XEON) for arm in ("ppo-lam1", "mappo-lam1")]
    (wider,) = new_machine_checks(summaries + further, META)
    assert wider.values["ppo-lam1"][:3] == (fitted, [0.30, 0.13, 0.5, 0.11, 0.13], found_means) and wider.n == 2
    text = "\n".join(machine_component_lines(summaries, [], META))
    inside = sum(fitted.run_low <= v <= fitted.run_high for v in values)
    assert inside == 3  # 0.30 lands outside
    assert f"| ppo-lam1 | [{fitted.run_low:.3f}, {fitted.run_high:.3f}] | 3 of 4 (0 of the 0 failed) |" in text
    assert "(2 degrees of freedom, fewer than 5: wide and fragile)" in text
    # the difference: mappo-lam1 − ppo-lam1 = gap + seed / 1000 on every run; 5's −0.2 lands outside
    diffs = {t: [gap[t] + 0.009, gap[t] + 0.010] for t in ppo}
    d_means = [statistics.fmean(diffs[t]) for t in ("long", "long-sftrm2", "long-sftrm3")]
    d_within = statistics.fmean([statistics.variance(diffs[t]) for t in ("long", "long-sftrm2", "long-sftrm3")])
    half = t * math.sqrt(statistics.variance(d_means) * (1 + 1 / 3) + d_within * (1 - 1 / 2))
    low, high = statistics.fmean(d_means) - half, statistics.fmean(d_means) + half
    assert low < 0.019 < high and not low < -0.19  # 4's inside, 5's outside
    assert f"| mappo-lam1 − ppo-lam1 | [{low:.3f}, {high:.3f}] | 2 of 4 (0 of the 2 failed) |" in text  # 5: gold < step 0
    mean_half = t * statistics.stdev(means) * math.sqrt(1 + 1 / 3)
    assert (fitted.mean_low, fitted.mean_high) == pytest.approx((statistics.fmean(means) - mean_half,
                                                                 statistics.fmean(means) + mean_half))
    assert f"| [{fitted.mean_low:.3f}, {fitted.mean_high:.3f}] | 2 of 2 (4: 0.215, 5: 0.120) |" in text


# ---- the committed study, recomputed with independent code ----


def committed(name):
    path = ROOT / "docs/study" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def finals_by(runs, task, arm):
    return {r["seed"]: r["gold"][-1] for r in runs if r["task"] == task and r["arm"] == arm}


def test_the_pre_registered_pair_across_every_sft_rm_seed_recomputes_from_runs_jsonl():
    """Every SFT + RM seed of the long task on which both arms of the pre-registered pair share two or more PPO
    seeds enters (the first n shared seeds each, n the fewest); the across-model-seed interval (t over the model
    seeds' means) and the prediction interval of a new SFT + RM seed's mean, as the report and the page print
    them."""
    runs = committed("runs.jsonl")
    baseline, method = MODEL_SEED_PAIRS["long"][0]
    shared = {}
    for task in ("long", *MODEL_SEED_TASKS):
        b, m = finals_by(runs, task, baseline), finals_by(runs, task, method)
        seeds = sorted(set(b) & set(m))
        if len(seeds) >= 2:
            shared[task] = (b, m, seeds)
    n = min(len(seeds) for _, _, seeds in shared.values())
    means = np.array([np.mean([m[s] - b[s] for s in seeds[:n]]) for b, m, seeds in shared.values()])
    k = len(means)
    assert k >= 3
    centre, sd = means.mean(), means.std(ddof=1)
    half = stats.t.ppf(0.975, k - 1) * sd / math.sqrt(k)
    predicted = stats.t.ppf(0.975, k - 1) * sd * math.sqrt(1 + 1 / k)
    report = (ROOT / "docs/study/README.md").read_text()
    assert (f"| {method} − {baseline} | across {k} | {n} each | | | {centre:.3f} [{centre - half:.3f}, "
            f"{centre + half:.3f}];") in report
    assert (f"| {method} − {baseline} | {method} − {baseline} | "
            f"{', '.join(str(TASKS[t].model_seed) for t in shared)} (n = {n}) |") in report
    assert f"| {centre:.3f} [{centre - predicted:.3f}, {centre + predicted:.3f}] |" in report
    lead = f"- **{method} − {baseline} (λ = 1) on {k} SFT + RM seeds"
    gold = f": gold {centre:+.3f} [{centre - half:.3f}, {centre + half:.3f}]"
    page = (ROOT / "docs/study-findings.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for text in (page, readme):  # the lead's parenthesis, if any, names the seeds added later (test_study_history)
        assert any(line.startswith(lead) and gold in line.split("**")[1] for line in text.splitlines())
    assert f"its mean over {n} PPO seeds is predicted in [{centre - predicted:.3f}, {centre + predicted:.3f}]" in readme


def test_the_committed_reruns_repeat_committed_rows_from_another_machine_and_recompute():
    """``machine_reruns.jsonl`` (when the study has one) holds only runs of (task, arm, seed)s that ``runs.jsonl``
    holds once each, made on another machine; the report prints each rerun's difference from its committed run.
    Without the file the report has no same-seed section."""
    runs, reruns = committed("runs.jsonl"), committed("machine_reruns.jsonl")
    rows = {}
    for r in runs:
        assert (r["task"], r["arm"], r["seed"]) not in rows, "a (task, arm, seed) twice in runs.jsonl"
        rows[r["task"], r["arm"], r["seed"]] = r
    report = (ROOT / "docs/study/README.md").read_text()
    assert ("**What was measured.** The pair's" in report) == bool(reruns)
    for rerun in reruns:
        row = rows[rerun["task"], rerun["arm"], rerun["seed"]]
        assert rerun["machine"] and machine_line(rerun["machine"]) != (machine_line(row["machine"]) if
                                                                       row.get("machine") else None)
        old, new = row["gold"][-1], rerun["gold"][-1]
        assert f"| {rerun['task']} | {rerun['arm']} | {rerun['seed']} | {old:.4f} | {new:.4f} | {new - old:+.4f} |" \
            in report


def test_the_readme_headline_is_what_study_findings_writes():
    from evaluation.study.findings import rewrite_headline

    runs, positions, reruns = committed("runs.jsonl"), committed("positions.jsonl"), committed("machine_reruns.jsonl")
    meta = json.loads((ROOT / "docs/study/study_meta.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert rewrite_headline(readme, runs, positions, reruns, meta) == readme
    lines = headline(runs, positions, reruns, meta)
    assert len(lines) >= 3 and all(line in readme for line in lines)


def test_the_runner_files_reruns_beside_the_committed_rows_and_refuses_to_replace_them(tmp_path, monkeypatch, capsys):
    """``report`` stops with a one-line error when OUT's runs repeat committed rows made on another machine (runs.jsonl
    untouched); ``reruns`` files them in machine_reruns.jsonl instead; ``reruns`` without runs.jsonl is an error."""
    from evaluation.study import report, runner
    from evaluation.study.summaries import run_summary

    out, report_dir = tmp_path / "out", tmp_path / "docs"
    directory = out / "long" / "ppo-lam1" / "seed9"
    directory.mkdir(parents=True)
    (directory / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "eval/score": 3.0 + step / 100, "eval/gold": 0.1 + step / 1000,
                    "eval/response_length": 100.0}) + "\n" for step in (0, 12)))
    marker = {"task": "long", "arm": "ppo-lam1", "seed": 9, "wall_s": 1.0, "cpu_s": 1.0, "commit": "c",
              "finished": "2026-11-27 16:00:00"}
    (directory / runner.MARKER).write_text(json.dumps(marker))
    row = run_summary(directory)  # the committed row: the same run, its machine not recorded
    (directory / runner.MARKER).write_text(json.dumps({**marker, "machine": XEON}))
    report_dir.mkdir()
    rendered = []
    monkeypatch.setattr(report, "render", lambda summaries, where: rendered.append(len(summaries)))
    with pytest.raises(SystemExit) as stop:
        runner.main(["reruns", "--out", str(out), "--report_dir", str(report_dir)])
    assert stop.value.code == 2 and "runs.jsonl: no such file" in capsys.readouterr().err
    (report_dir / "runs.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(SystemExit) as stop:
        runner.main(["report", "--out", str(out), "--report_dir", str(report_dir)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "long/ppo-lam1/9" in err
    assert (report_dir / "runs.jsonl").read_text() == json.dumps(row) + "\n" and not rendered
    runner.main(["reruns", "--out", str(out), "--report_dir", str(report_dir)])
    (filed,) = [json.loads(line) for line in (report_dir / "machine_reruns.jsonl").read_text().splitlines()]
    assert filed == {**row, "machine": XEON} and rendered == [1]
    assert (report_dir / "runs.jsonl").read_text() == json.dumps(row) + "\n"
