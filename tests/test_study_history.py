"""The study's round-5 checks, each against code written here: one definition of a failed run counted wherever runs
are counted (the two diverged runs of SFT + RM seed 5 above all), the corrected figures, the history of decisions
generated from git (no commit touching the study left out) and the pre-registration check."""
import json
import math
import re
import statistics
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from evaluation.study.findings import readme_findings
from evaluation.study.history import history_lines, registration

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "docs/study"


def rows(name, folder=STUDY):
    return [json.loads(line) for line in (folder / name).read_text().splitlines() if line.strip()]


def failed(run):
    """The definition, written again: ends collapsed (final length < half of step 0's), or final RM or gold below
    step 0's."""
    return (run["length"][-1] < 0.5 * run["length"][0] or run["rm"][-1] < run["rm"][0]
            or run["gold"][-1] < run["gold"][0])


RUNS, RERUNS, UNSEEN = rows("runs.jsonl"), rows("machine_reruns.jsonl"), rows("unseen_seeds.jsonl")
ASYNC = rows("runs.jsonl", ROOT / "docs/async")
META = json.loads((STUDY / "study_meta.json").read_text())
REPORT = (STUDY / "README.md").read_text()
PAGE = (ROOT / "docs/study-findings.md").read_text()


def findings():
    return "\n".join(readme_findings(RUNS, rows("positions.jsonl"), RERUNS, META))


def test_every_failed_run_is_counted_and_named_in_the_findings_and_the_report():
    bad = [r for r in RUNS if failed(r)]
    keys = {(r["task"], r["arm"], r["seed"]) for r in bad}
    assert {("long-sftrm5", "mappo-lam1", 11), ("long-sftrm5", "ppo-lam1", 13)} <= keys  # the diverged ones
    text = findings()
    assert f"**{len(bad)} of {len(RUNS)} runs failed**" in text and text in PAGE
    bullet = next(line for line in text.splitlines() if "runs failed**" in line)
    parts = {m.group(1): m.group(2) for m in re.finditer(r"((?:short|long[-\w]*)/[\w.-]+) (\d+) of \d+ \(", bullet)}
    for task, arm, seed in keys:
        where = bullet.index(f"{task}/{arm} ")
        entry = re.split(r"; (?:short|long[-\w]*)/", bullet[where:])[0]
        assert f"seed {seed}: " in entry, (task, arm, seed)
    assert sum(map(int, parts.values())) == len(bad)
    section = REPORT[REPORT.index("#### Two pairs on several SFT + RM seeds"):REPORT.index("#### Where a new seed")]
    for task, arm, seed in keys & {k for k in keys if k[0].startswith("long-sftrm")}:
        assert f"SFT + RM seed {task[-1]} {arm} seed {seed} (" in section, (task, arm, seed)
    assert "failed runs (2 of 96;" in section  # the pre-registered pair on 6 SFT + RM seeds × 8 × 2 arms


def test_every_table_row_counts_its_failed_runs():
    """The README's first table (exploration seeds, each arm against PPO) and the confirmation table."""
    for line in (line for line in PAGE.splitlines() if re.match(r"\| (short|long) \|", line)):
        cells = [c.strip() for c in line.strip("|").split("|")]
        task, arm, n = cells[0], cells[1], int(cells[2])
        runs = [r for r in RUNS if (r["task"], r["arm"]) == (task, arm) and r["seed"] <= n]
        assert cells[-1].split(" ")[0] == str(sum(map(failed, runs))), line
    for line in (line for line in PAGE.splitlines() if re.match(r"\| (ppo|mappo)[-\w.]* \| 8 \| 0\.1", line)):
        cells = [c.strip() for c in line.strip("|").split("|")]
        runs = [r for r in RUNS if (r["task"], r["arm"]) == ("long", cells[0]) and 9 <= r["seed"] <= 16]
        assert cells[-1].split(" ")[0] == str(sum(map(failed, runs))), line


def _pair_diffs(metric="gold"):
    """mappo-lam1 − ppo-lam1 final ``metric`` per PPO seed 9-16, per SFT + RM seed (1234, 2, ..., 6)."""
    tasks = ["long"] + [f"long-sftrm{k}" for k in range(2, 7)]
    final = {(r["task"], r["arm"], r["seed"]): r[metric][-1] for r in RUNS}
    return [[final[t, "mappo-lam1", s] - final[t, "ppo-lam1", s] for s in range(9, 17)] for t in tasks]


def _tost_p(values, margin):
    n, mean = len(values), statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(n)
    return max(scipy_stats.t.sf((mean + margin) / se, n - 1), scipy_stats.t.cdf((mean - margin) / se, n - 1))


def test_the_corrected_sft_rm_seed_figures_by_hand():
    """The ANOVA p that seed 5's two diverged runs make 0.793, the rank test, the ANOVA without seed 5, and the TOST
    p of the pre-registered pair in its own 2-test family (Holm by hand) against the 4-test family's."""
    gold = _pair_diffs()
    spreads = [statistics.stdev(d) for d in gold]
    assert max(spreads) == pytest.approx(spreads[4]) and spreads[4] > 5 * statistics.median(spreads)
    anova = scipy_stats.f_oneway(*gold).pvalue
    rank = scipy_stats.kruskal(*gold).pvalue
    without = scipy_stats.f_oneway(*(d for i, d in enumerate(gold) if i != 4)).pvalue
    assert (round(anova, 3), round(rank, 3)) == (0.793, 0.002) and without < 0.001
    text = findings()
    assert (f"Kruskal-Wallis rank test p {rank:.3f}, one-way ANOVA p {anova:.3f} — the ANOVA is moved by SFT + RM seed "
            f"5's within-seed standard deviation {spreads[4]:.3f}") in text
    assert "without that seed, ANOVA p <0.001" in text
    means = {m: [statistics.fmean(d) for d in _pair_diffs(m)] for m in ("gold", "rm")}
    raw = {"gold": _tost_p(means["gold"], 0.010), "rm": _tost_p(means["rm"], 0.067)}
    low, high = sorted(raw, key=raw.get)
    own = {low: 2 * raw[low], high: max(2 * raw[low], raw[high])}
    assert f"Holm-adjusted TOST p gold {own['gold']:.3f}, RM {own['rm']:.3f} — equivalent there" in text
    assert own["gold"] < 0.05 < 3 * raw["gold"]  # equivalent in its own family, not in the 4-test one


def test_the_machine_and_unseen_sections_by_hand():
    committed = {(r["task"], r["arm"], r["seed"]): r for r in RUNS}
    pairs = [(committed[r["task"], r["arm"], r["seed"]], r) for r in RERUNS]
    inside = 0
    for arm in ("ppo-lam1", "mappo-lam1"):
        base = [committed["long", arm, s]["gold"][-1] for s in range(9, 17)]
        half = scipy_stats.t.ppf(0.975, 7) * statistics.stdev(base) * math.sqrt(1 + 1 / 8)
        inside += sum(abs(r["gold"][-1] - statistics.fmean(base)) <= half for c, r in pairs if r["arm"] == arm)
    rerun_failed = sum(failed(r) for _, r in pairs)
    same = sum(any(k["arm"] == r["arm"] and k["seed"] == r["seed"] and not k["async_rollout"]
                   and all(k[m] == r[m] for m in ("rm", "gold", "length")) for k in ASYNC) for r in RERUNS)
    assert (inside, rerun_failed, same) == (15, 2, 16)
    text = findings()
    assert (f"{inside} of 16 land inside their arm's published new-seed interval; {rerun_failed} of them failed, "
            f"against {sum(failed(c) for c, _ in pairs)} of the 16 committed runs") in text
    assert f"{same} of the 16 reruns equal, bit for bit, the K = 0 runs" in text
    step0 = f"the reruns' step-0 RM {RERUNS[0]['rm'][0]:.3f} against the committed {pairs[0][0]['rm'][0]:.3f}"
    assert step0 in text and "2.900" in step0 and "2.616" in step0
    # unseen seeds: below the centre, the mean standardised residual, the failed one
    section = REPORT[REPORT.index("#### Unseen seeds of every published arm"):]
    residuals = [float(line.split("|")[7]) for line in section.splitlines()
                 if re.match(r"\| (short|long) \| [\w.-]+ \| 17 \|", line)]
    assert len(residuals) == 16
    below = sum(r < 0 for r in residuals)
    assert f"{below} of 16 fall below their interval's centre (mean standardised residual " \
           f"{statistics.fmean(residuals):+.2f})" in section
    assert f"({sum(map(failed, UNSEEN))} failed: long/mappo-lam1 (collapsed, RM below step 0, inside))" in section
    ppo = [committed["long", "ppo", s]["gold"][-1] for s in range(1, 9)]
    own = [r for r in UNSEEN if (r["task"], r["arm"]) == ("long", "ppo")][0]["gold"][-1]
    mine = (own - statistics.fmean(ppo)) / (statistics.stdev(ppo) * math.sqrt(1 + 1 / 8))
    assert "| long | ppo | 17 |" in section and f"| {mine:+.2f} |" in section


STUDY_PATHS = ("docs/study", "docs/study-findings.md", "evaluation/study", "evaluation/study.py", "evaluation/study_report.py",
               "evaluation/study_findings.py", "evaluation/study_positions.py", "evaluation/study_inference.py",
               "evaluation/study_plots.py", "scripts/reproduce/study.sh")
"""The study's design, data and report, past and present, written again."""


def _git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def test_no_commit_touching_the_study_is_missing_from_the_generated_history():
    rendered = "\n".join(history_lines(ROOT, META))
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        assert "The clone is shallow" in rendered
        return
    expected = _git("rev-list", "--full-history", "--no-merges", "HEAD", "--", "docs/study", "evaluation/study").split()
    assert expected
    missing = [sha[:7] for sha in expected if f"| `{sha[:7]}` |" not in rendered]
    assert missing == []
    rows = {line.split("`")[1]: line for line in rendered.splitlines() if line.startswith("| `")}
    for sha in _git("rev-list", "HEAD", "--", "docs/study/runs.jsonl").split():
        now = len(_git("show", f"{sha}:docs/study/runs.jsonl").splitlines())
        parents = _git("show", "-s", "--format=%P", sha).split()
        try:
            before = len(_git("show", f"{parents[0]}:docs/study/runs.jsonl").splitlines())
        except subprocess.CalledProcessError:
            before = 0
        if len(parents) == 1 and now > before and sha[:7] in rows:
            assert "runs added" in rows[sha[:7]], sha
    for sha in ("e778135", "32f9c87", "becd201"):  # published before their round's runs were all in
        assert "interim look" in rows[sha], sha
    assert "interim look" not in rows["db09428"]


def test_the_committed_history_is_whole_up_to_its_last_commit():
    section = REPORT[REPORT.index("#### Order of decisions (generated from git)"):]
    listed = re.findall(r"^\| `([0-9a-f]{7})` \|", section, re.M)
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        return
    every = [sha[:7] for sha in _git("log", "--reverse", "--format=%H", "--", *STUDY_PATHS).split()]
    last = every.index(listed[-1])
    assert [sha for sha in every[:last + 1] if sha not in listed] == []


def _repo(tmp_path):
    def git(*args, when="2026-01-01T10:00:00+00:00"):
        env = {"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, env=env)

    git("init", "-q")
    (tmp_path / "docs/study/plans").mkdir(parents=True)
    return git


PLAN = "# x\nArms: a, b. Seeds 1-4. Primary metric: gold. Margin 0.01. Analysis: paired t. Family: its own.\n"


def _runs(path, started):
    path.write_text("".join(json.dumps({"arm": "a", "seed": s, "started_at": started, "gold": [0.1, 0.2]}) + "\n"
                            for s in (1, 2)))


def test_a_plan_committed_before_the_first_run_is_confirmatory_and_not_otherwise(tmp_path):
    git = _repo(tmp_path)
    plan = tmp_path / "docs/study/plans/x.md"
    plan.write_text(PLAN)
    git("add", "-A")
    git("commit", "-qm", "plan", when="2026-01-01T10:00:00+00:00")
    runs = tmp_path / "docs/study/x.jsonl"
    _runs(runs, "2026-01-01T11:00:00Z")
    assert registration(tmp_path, plan, runs).label == "confirmatory"
    _runs(runs, "2026-01-01T09:59:00Z")  # a run started before the plan was committed
    found = registration(tmp_path, plan, runs)
    assert found.label == "exploratory" and set(found.late) == {"arms", "seeds", "metric", "margin", "analysis",
                                                                "family"}
    _runs(runs, "2026-01-01T11:00:00Z")
    amendment = tmp_path / "docs/study/plans/x-amendment-1.md"
    amendment.write_text("Family: changed.\n")
    git("add", "-A")
    git("commit", "-qm", "amend", when="2026-01-01T12:00:00+00:00")  # after the first run started
    assert registration(tmp_path, plan, runs).label == "exploratory"


def test_a_plan_that_names_no_family_or_is_not_committed_is_exploratory(tmp_path):
    git = _repo(tmp_path)
    plan = tmp_path / "docs/study/plans/y.md"
    plan.write_text(PLAN.replace(" Family: its own.", ""))
    runs = tmp_path / "docs/study/y.jsonl"
    _runs(runs, "2026-01-01T11:00:00Z")
    assert registration(tmp_path, plan, runs).late == list(("arms", "seeds", "metric", "margin", "analysis",
                                                            "family"))  # not committed at all
    git("add", "-A")
    git("commit", "-qm", "plan", when="2026-01-01T10:00:00+00:00")
    assert registration(tmp_path, plan, runs).late == ["family"]


PLANS = sorted(path.stem for path in (STUDY / "plans").glob("*.md") if "-amendment-" not in path.stem)


def registration_rows() -> dict:
    """The report's pre-registration table: first cell -> its label."""
    section = REPORT[REPORT.index("#### Pre-registration, checked"):REPORT.index("#### Order of decisions")]
    return dict(re.findall(r"^\| ([^|]+?) \|.*\*\*(confirmatory|exploratory)\*\*", section, flags=re.M))


def test_round_four_is_exploratory_by_the_check():
    rows = registration_rows()
    round_four = {name: label for name, label in rows.items() if name not in PLANS}
    assert round_four and set(round_four.values()) == {"exploratory"}
    assert "90a0d80" in REPORT  # the families, committed after every one of these runs had started


def _committed_at(path: Path) -> datetime:
    """When ``path`` was first committed (git's author time, UTC)."""
    stamp = subprocess.run(["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%aI", "--", str(path)],
                           capture_output=True, text=True, check=True).stdout.split()[-1]
    return datetime.fromisoformat(stamp).astimezone(timezone.utc)


@pytest.mark.parametrize("plan", PLANS)
def test_each_plan_files_label_is_its_commits_against_its_first_run(plan):
    """A plan-file comparison is confirmatory exactly when its plan and every amendment were committed before the
    first of its runs started (recomputed from git and the runs' ``started_at``)."""
    runs = [json.loads(line) for line in (STUDY / f"{plan}.jsonl").read_text().splitlines() if line.strip()]
    first = min(datetime.fromisoformat(run["started_at"]).astimezone(timezone.utc) for run in runs)
    files = [STUDY / "plans" / f"{plan}.md", *sorted((STUDY / "plans").glob(f"{plan}-amendment-*.md"))]
    expected = "confirmatory" if all(_committed_at(path) < first for path in files) else "exploratory"
    assert registration_rows()[plan] == expected


# --- the independent reader's findings (issue 54, second part), each recomputed here ---------------------------------

README = (ROOT / "README.md").read_text()
HEADLINE = README[README.index("## What the study shows"):].split("\n## ")[0]


def _section(title, text=REPORT):
    start = text.index(title)
    return text[start:text.index("\n#", start + len(title))]


def test_no_exploratory_comparison_is_called_pre_registered():
    """The check labels every comparison exploratory, so no generated or hand-written page names one pre-registered
    (git's commit subjects in the order of decisions are quoted as they are)."""
    history = _section("#### Order of decisions (generated from git)")
    for name, text in (("report", REPORT.replace(history, "")), ("page", PAGE), ("README", README),
                       ("async", (ROOT / "docs/async-rollouts.md").read_text()),
                       ("async report", (ROOT / "docs/async/report.md").read_text())):
        assert "pre-registered" not in text.lower().replace("pre-registration", ""), name


def test_the_headline_says_which_seeds_came_after_a_look_and_that_both_families_are_post_hoc():
    plan = next(p for p in META["plans"] if "long-sftrm4" in p["tasks"])
    later = sorted({int(r["task"][-1]) for r in RUNS if r["task"].startswith("long-sftrm")
                    and r["arm"] in plan["arms"] and r["commit"].startswith(plan["elements"]["seeds"])})
    assert later == [4, 5, 6]
    lead = (f"on 6 SFT + RM seeds ({', '.join(map(str, later))} added after the first 3 seeds' runs had been read): "
            "gold")
    tail = "neither family was committed before the runs: both readings are post hoc, exploratory"
    assert lead in HEADLINE and tail in HEADLINE and lead in PAGE
    # neither family was committed before the first run: the report's check says so for the 4-test one
    row = next(line for line in _section("#### Pre-registration, checked").splitlines() if "λ = 1 pair" in line)
    assert "family" in row.split("**exploratory**")[1]


def test_every_interval_under_five_degrees_of_freedom_is_labelled_in_the_bold_leads():
    leads = re.findall(r"^- \*\*(.+?)\*\*", PAGE, re.M) + re.findall(r"^- \*\*(.+?)\*\*", HEADLINE, re.M)
    found = 0
    for lead in leads:
        for n, paren in re.findall(r"(?:on|from) (\d+) SFT \+ RM seeds( \([^)]*\))?", lead):
            if int(n) - 1 < 5:
                found += 1
                assert f"{int(n) - 1} degrees of freedom, fewer than 5" in paren, lead[:80]
    assert found >= 4  # the λ = 0.95 pair and the machine check, in the page and the README


def test_which_p_values_are_holm_adjusted_is_said_exactly():
    families = _section("#### Families of tests: one multiplicity rule")
    assert "Every p printed" not in families
    for raw in ("the verdict tables' raw *p* column", "ANOVA and Kruskal-Wallis p's", "raw and in no family",
                "TOST p \"in its own family\""):
        assert raw in families, raw
    # the verdict table's raw p is a paired t test over the eight compared differences, not a Holm-adjusted one
    verdict = _section("#### The verdict: MA-PPO's best")
    row = next(line for line in verdict.splitlines() if line.startswith("| gold |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    final = {(r["arm"], r["seed"]): r["gold"][-1] for r in RUNS if r["task"] == "long"}
    diffs = []
    for fold in re.findall(r"chosen on (\d+)-(\d+), compared on (\d+)-(\d+): ([\w.-]+) vs ([\w.-]+)", cells[1]):
        pick, compare = range(int(fold[0]), int(fold[1]) + 1), range(int(fold[2]), int(fold[3]) + 1)
        candidates = {a for a, s in final if a.startswith("mappo") and s in pick}
        best = max(candidates, key=lambda a: statistics.fmean(final[a, s] for s in pick))
        assert best == fold[4]  # chosen on the first half named, compared on the other
        diffs += [final[best, s] - final[fold[5], s] for s in compare]
    assert cells[4] == f"{scipy_stats.ttest_1samp(diffs, 0).pvalue:.3f}"


def test_the_machine_and_unseen_sections_name_the_code_versions():
    def commits(rows):
        return ", ".join(f"`{c[:7]}`" for c in sorted({r["commit"] for r in rows}))

    keys = {(r["task"], r["arm"], r["seed"]) for r in RERUNS}
    machine, unseen = _section("#### The machine component"), _section("#### Unseen seeds of every published arm")
    assert (f"the code (reruns at {commits(RERUNS)}, committed runs at "
            f"{commits(r for r in RUNS if (r['task'], r['arm'], r['seed']) in keys)})") in machine
    assert f"trained at {commits(r for r in ASYNC if not r['async_rollout'])}" in machine
    assert f"the code (unseen seeds at {commits(UNSEEN)}" in unseen
    assert f"another code version (reruns at {commits(RERUNS)}" in findings()


def _start(rows):
    return min(datetime.fromisoformat(r["finished"].replace("Z", "+00:00")).timestamp() - r["wall_s"] for r in rows)


def test_the_registration_rows_count_every_run_and_say_when_an_outcome_was_known():
    section = _section("#### Pre-registration, checked")
    rows = [r for r in RUNS if r["arm"] in ("ppo", "mappo") and (
        (r["task"] == "long" and r["seed"] <= 8) or (r["task"] in ("long-sftrm2", "long-sftrm3") and r["seed"] >= 9))]
    first = datetime.fromtimestamp(_start(rows), timezone.utc).strftime("%Y-%m-%d %H:%M")
    row = next(line for line in section.splitlines() if "λ = 0.95 pair" in line)
    assert f"| {first} |" in row and first.startswith("2026-11-24")
    assert "(arms, seeds, metric, margin, analysis, family not committed before the first run)" in row
    known = float(_git("show", "-s", "--format=%ct", "7d09fcf").strip())
    assert known < _start(RERUNS)  # the K = 0 runs the reruns equal were in the repository before the first rerun
    row = next(line for line in section.splitlines() if line.startswith("| machine reruns"))
    assert "its outcome was in the repository before its plan: `7d09fcf`" in row


def test_the_three_seed_look_is_flagged_and_the_count_stops_at_a_named_commit():
    history = _section("#### Order of decisions (generated from git)")
    rows = {line.split("`")[1]: line for line in history.splitlines() if line.startswith("| `")}
    fresh = {line.split("`")[1]: line for line in history_lines(ROOT, META) if line.startswith("| `")}
    for found in (rows, fresh) if "23f4a93" in fresh else (rows,):  # a shallow clone may lack it
        assert "**interim look**" in found["23f4a93"] and "| 216 |" in found["23f4a93"]
        assert "**interim look**" not in found["b31ad11"]
    count, last = re.search(r"(\d+) commits touch the study's paths up to and including `([0-9a-f]{7})`",
                            history).groups()
    if _git("rev-parse", "--is-shallow-repository").strip() != "true":
        assert int(count) == int(_git("rev-list", "--count", last, "--", *STUDY_PATHS)) == len(rows)


def test_every_failed_run_is_in_the_report_section_the_findings_name():
    bullet = next(line for line in PAGE.splitlines() if "runs failed**" in line)  # the generator's: test_study_readme
    named = dict((task, section) for tasks, section in re.findall(r"([\w, -]+?) under \"([^\"]+)\"", bullet)
                 for task in tasks.strip("( ;").split(", "))
    long_part = REPORT[REPORT.index("## long task"):]
    for r in (r for r in RUNS if failed(r)):
        section = named[r["task"]]
        if section == "Failed runs":
            text = _section("#### Failed runs", REPORT[REPORT.index(f"## {r['task']} task"):])
            row = next(line for line in text.splitlines() if line.startswith(f"| {r['arm']} |"))
            assert f"; {r['seed']}: " in row.split("|")[3], (r["task"], r["arm"], r["seed"])
        else:
            assert f"SFT + RM seed {r['task'][-1]} {r['arm']} seed {r['seed']} (" in _section(f"#### {section}",
                                                                                                   long_part)


def _between_sd(groups):
    """Method of moments: var of the seeds' means − pooled within variance / n, floored at 0."""
    n = len(groups[0])
    within = statistics.fmean(statistics.variance(g) for g in groups)
    return math.sqrt(max(0.0, statistics.variance([statistics.fmean(g) for g in groups]) - within / n))


def test_the_floored_between_seed_sd_is_qualified_with_its_value_without_seed_5():
    gold = _pair_diffs()
    assert _between_sd(gold) == 0.0
    without = _between_sd([d for i, d in enumerate(gold) if i != 4])
    assert f"across model seeds 0.0000 (method of moments, floored at 0; without SFT + RM seed 5, whose wild " \
           f"within-seed spread inflates the within term, {without:.4f})" in REPORT and f"{without:.4f}" == "0.0060"


def test_the_machine_lead_counts_the_differences_outside_their_interval():
    table = _section("**SFT + RM seeds 4, 5, 6, made on")
    row = next(line for line in table.splitlines() if line.startswith("| mappo-lam1 − ppo-lam1 |"))
    low, high = map(float, re.search(r"\[(-?[\d.]+), (-?[\d.]+)\]", row).groups())
    diffs = _pair_diffs()[3:]
    outside = [(k, s) for k, d in zip((4, 5, 6), diffs) for s, v in zip(range(9, 17), d) if not low <= v <= high]
    assert outside == [(5, 11), (5, 13)]  # the two diverged runs' seeds
    final = {(r["task"], r["arm"], r["seed"]): r for r in RUNS}
    bad = sum(failed(final[f"long-sftrm{k}", "ppo-lam1", s]) or failed(final[f"long-sftrm{k}", "mappo-lam1", s])
              for k, s in outside)
    assert (f"and {24 - len(outside)} of 24 of the pair's per-seed differences land inside theirs (of the "
            f"{len(outside)} outside, {bad} are on a seed where a run failed)") in HEADLINE


def test_the_same_weight_interval_is_printed_with_enough_digits():
    final = {(r["arm"], r["seed"]): r["gold"][-1] for r in RUNS if r["task"] == "long"}
    d = [final["mappo", s] - final["ppo-lam0.99", s] for s in range(1, 9)]
    half = scipy_stats.t.ppf(0.95, 7) * statistics.stdev(d) / math.sqrt(8)
    low, high = statistics.fmean(d) - half, statistics.fmean(d) + half
    assert high > 0.010  # outside the margin, which a 3-digit print hid
    assert f"not shown equivalent within ±0.01: 90% CI [{low:.4f}, {high:.4f}]" in PAGE


def test_the_n_sweep_family_is_listed_and_its_holm_tost_p_values_recompute():
    families = _section("#### Families of tests: one multiplicity rule")
    row = next(line for line in families.splitlines() if line.startswith("| against MA-PPO n = 5 |"))
    size, members = int(row.split("|")[2]), row.split("|")[4]
    final = {(r["task"], r["arm"], r["seed"]): r for r in RUNS}
    raw = {}
    for task, arm, base, lo, hi, metrics in re.findall(r"([\w-]+): ([\w.-]+) − ([\w.-]+) \(seeds (\d+)-(\d+)\) "
                                                      r"([\w/]+)", members):
        for metric in metrics.split("/"):
            d = [final[task, arm, s][metric][-1] - final[task, base, s][metric][-1] for s in range(int(lo), int(hi) + 1)]
            raw[task, arm, metric] = _tost_p(d, 0.010 if metric == "gold" else 0.067)
    assert len(raw) == size == 32
    order = sorted(raw, key=raw.get)
    holm, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * raw[key]))
        holm[key] = running
    text = findings()
    for arm in ("mappo-n3", "mappo-n10", "mappo-ninf", "mappo-entropy"):
        assert (f"TOST p {raw['long', arm, 'gold']:.3f} raw, {holm['long', arm, 'gold']:.3f} after Holm"
                in text.replace("p <0.001", "p 0.000")), arm
    assert "set after these data had been seen" in text
