"""The study's history and pre-registration, read from git rather than written by hand.

:func:`study_history`: every commit touching the study (:data:`PATHS`), oldest first, with its time, its kind of
change (from the files and rows it changed), the runs the run files held after it, and whether it was an *interim
look* (a report written while a group of runs it showed was still incomplete); ``study_meta.json``'s ``notes``
annotate commits, never replace them. :func:`registration` / :func:`study_registrations`: a comparison is
*confirmatory* only if every element of its plan (:data:`PLAN_ELEMENTS`) was committed before its first run started,
*exploratory* otherwise: ``docs/study/plans/<comparison>.md`` (and ``-amendment-N.md``) beside
``docs/study/<comparison>.jsonl`` whose rows carry ``started_at``, or for the comparisons made before that convention,
``study_meta.json``'s ``plans`` naming the commit that fixed each element (its time read from git here)."""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

PATHS = ("docs/study", "docs/study-findings.md", "evaluation/study", "evaluation/study.py",
         "evaluation/study_report.py", "evaluation/study_findings.py", "evaluation/study_positions.py",
         "evaluation/study_inference.py", "evaluation/study_plots.py", "scripts/reproduce/study.sh")
"""The study's design, data and report, past and present (the package was ``evaluation/study*.py`` before)."""

DESIGN = ("evaluation/study/design.py", "evaluation/study.py", "scripts/reproduce/study.sh", "docs/study/plans/")
"""Where the study's design lives or lived: arms, seeds, tiers, margins (``evaluation/study.py`` held them before
the package), and the plans of comparisons."""

REPORT = ("docs/study/README.md", "docs/study-findings.md")

PLAN_ELEMENTS = ("arms", "seeds", "metric", "margin", "analysis", "family")


def git(root: Path, *args: str) -> Optional[str]:
    """git's output in ``root``, or None when git or the repository is not there."""
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def utc(text: str) -> datetime:
    """An ISO-8601 time (a run record's ``started_at``, git's ``%cI``, or ``YYYY-MM-DD HH:MM:SS`` meaning UTC)."""
    found = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return found if found.tzinfo else found.replace(tzinfo=timezone.utc)


def run_files(names: Sequence[str]) -> List[str]:
    """The run files among ``names``: every ``docs/study/*.jsonl`` but the position samples."""
    return [n for n in names if re.fullmatch(r"docs/study/[^/]+\.jsonl", n) and not n.endswith("positions.jsonl")]


def _rows(root: Path, commit: str, paths: Sequence[str]) -> Dict[str, Dict[Tuple, float]]:
    """Per run file, its rows at ``commit``: (task, arm, seed, K) -> final gold."""
    found = {}
    for path in paths:
        text = git(root, "show", f"{commit}:{path}") or ""
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        found[path] = {(r.get("task"), r.get("arm"), r.get("seed"), r.get("async_rollout")): (r.get("gold") or [None])[-1]
                       for r in rows}
    return found


@dataclass
class Commit:
    sha: str
    when: str
    subject: str
    files: List[str]
    kinds: List[str] = field(default_factory=list)
    runs: int = 0
    interim: bool = False
    note: str = ""


def study_history(root: Path, notes: Optional[Dict[str, str]] = None,
                  looks: Optional[Dict[str, dict]] = None) -> Tuple[List[Commit], str]:
    """(the commits touching :data:`PATHS`, oldest first, each classified; a line on how complete the history is).
    ``looks`` (``study_meta.json``'s ``interim_looks``): an interim look the rows cannot show (a comparison extended
    by new tasks rather than by more seeds of one), ``{first commit: {"until": commit, "why": text}}``: every commit
    from the first to ``until`` (not included) that changed the report is an interim look."""
    log = git(root, "log", "--reverse", "--format=@%H %cI %P%x09%s", "--name-only", "--", *PATHS)
    if not log:
        return [], "No git history here: the history of decisions cannot be generated."
    shallow = (git(root, "rev-parse", "--is-shallow-repository") or "").strip() == "true"
    commits = []
    for block in log.split("\n@"):
        head, *names = block.lstrip("@").strip().split("\n")
        ids, subject = head.split("\t", 1)
        sha, when, *parents = ids.split()
        commits.append(Commit(sha, when, subject, [n for n in names if n], ["merge"] if len(parents) > 1 else []))
    tracked = sorted({n for c in commits for n in run_files(c.files)})
    state: Dict[str, Dict[Tuple, float]] = {path: {} for path in tracked}
    snapshots = []
    for c in commits:
        changed = run_files(c.files)
        before = {path: dict(state[path]) for path in changed}
        state.update(_rows(root, c.sha, changed))
        added = any(set(state[p]) - set(before[p]) for p in changed)
        replaced = any(set(before[p]) - set(state[p]) or any(state[p][k] != v for k, v in before[p].items()
                                                             if k in state[p]) for p in changed)
        c.kinds = c.kinds or [kind for kind, hit in (
            ("design", any(f.startswith(DESIGN) for f in c.files)),
            ("runs added", added), ("runs replaced", replaced),
            ("analysis", any(f.endswith(".py") and not f.startswith(DESIGN) for f in c.files)),
            ("notes", "docs/study/study_meta.json" in c.files)) if hit]
        if not c.kinds:
            c.kinds = ["wording"] if any(f.endswith(".md") for f in c.files) else ["figures"]
        c.runs = sum(len(rows) for rows in state.values())
        c.note = (notes or {}).get(c.sha[:7], "")
        snapshots.append({p: dict(rows) for p, rows in state.items()})
    window = None
    for i, c in enumerate(commits):
        window = (looks or {}).get(c.sha[:7], window)
        if window and c.sha.startswith(window["until"]):
            window = None
        if any(f in REPORT for f in c.files):
            c.interim = any(_grows_later(snapshots[i], later) for later in snapshots[i + 1:])
            c.interim = c.interim or bool(window)
        if window and c.sha[:7] in looks:
            c.note = "; ".join(filter(None, (c.note, f"*interim look* from here to `{window['until']}` (noted): "
                                                     f"{window['why']}")))
    status = (f"The clone is shallow: only {len(commits)} of the study's commits are here, so the history below is "
              "incomplete (`git fetch --unshallow` gives it whole)." if shallow else
              f"{len(commits)} commits touch the study's paths up to and including `{commits[-1].sha[:7]}` "
              f"({commits[-1].when[:16].replace('T', ' ')} UTC), the last there when this section was rendered: the report's "
              f"own commit and later ones are not counted (`git log {commits[-1].sha[:7]} -- {' '.join(PATHS)}`).")
    return commits, status


def _block(key: Tuple) -> Tuple:
    task, _, seed, _ = key
    return task, (seed - 1) // 8 if isinstance(seed, int) else None


def _grows_later(now: Dict[str, Dict[Tuple, float]], later: Dict[str, Dict[Tuple, float]]) -> bool:
    """A later state holds every row of ``now`` unchanged and more rows in a (file, task, seed block) ``now`` has."""
    for path, rows in now.items():
        kept = later.get(path, {})
        if not rows or any(kept.get(k, object()) != v for k, v in rows.items()):
            continue
        shown = {_block(k) for k in rows}
        if any(_block(k) in shown for k in set(kept) - set(rows)):
            return True
    return False


def history_lines(root: Path, meta: Optional[dict]) -> List[str]:
    """The report's "Order of decisions": one line per commit of :func:`study_history`."""
    commits, status = study_history(root, (meta or {}).get("notes"), (meta or {}).get("interim_looks"))
    lines = ["#### Order of decisions (generated from git)", "",
             f"{status} Kind of change, from the files and rows each commit changed: *design* "
             f"({', '.join(f'`{d}`' for d in DESIGN)}), *runs added* / *runs replaced* (rows of a run file, "
             "`docs/study/*.jsonl` but positions), *analysis* (the study's code), *notes* (`study_meta.json`), "
             "*wording* (only the report's text), *merge*; *runs*: the rows of the run files after the commit; *interim "
             "look*: the report was written while a group of runs it showed (file, task, seeds 1-8 / 9-16 / 17-24) "
             "was still incomplete (a later commit added to it, keeping every row shown). A note in "
             "`study_meta.json` annotates a commit; it is printed after git's subject, never instead.", "",
             "| commit | time (UTC) | kind | runs | subject |", "|---|---|---|---|---|"]
    for c in commits:
        kind = ", ".join(c.kinds) + ("; **interim look**" if c.interim else "")
        subject = c.subject.replace("|", "/")[:160] + ("…" if len(c.subject) > 160 else "")
        lines.append(f"| `{c.sha[:7]}` | {c.when[:16].replace('T', ' ')} | {kind} | {c.runs} | {subject}"
                     + (f" — *note:* {c.note}" if c.note else "") + " |")
    return lines + [""]


@dataclass(frozen=True)
class Registration:
    comparison: str
    first_start: Optional[datetime]
    elements: Dict[str, Optional[Tuple[str, datetime]]]
    """Plan element -> (commit that fixed it, its time), None where nothing fixed it."""
    known: Optional[Tuple[str, datetime, str]] = None
    """(commit, time, what): where the comparison's outcome was in the repository before its plan (a plan's
    ``outcome_known``), which no element's time shows."""

    @property
    def late(self) -> List[str]:
        return [name for name, found in self.elements.items()
                if not found or not self.first_start or found[1] >= self.first_start]

    @property
    def label(self) -> str:
        return "exploratory" if self.late else "confirmatory"

    def text(self) -> str:
        start = self.first_start.strftime("%Y-%m-%d %H:%M") if self.first_start else "no run"
        fixed = "; ".join(f"{name} `{found[0][:7]}` {found[1].strftime('%Y-%m-%d %H:%M')}" if found
                          else f"{name}: not fixed by any commit" for name, found in self.elements.items())
        known = (f"; its outcome was in the repository before its plan: `{self.known[0][:7]}` "
                 f"{self.known[1].strftime('%Y-%m-%d %H:%M')} ({self.known[2]})" if self.known else "")
        return (f"| {self.comparison} | {start} | {fixed} | **{self.label}**"
                + (f" ({', '.join(self.late)} not committed before the first run)" if self.late else "") + known + " |")


def commit_time(root: Path, commit: str) -> Optional[Tuple[str, datetime]]:
    """(full hash, commit time), None where the commit is not in this clone (a shallow one, say)."""
    out = git(root, "show", "-s", "--format=%H %cI", commit, "--")
    if not out:
        return None
    sha, when = out.split()
    return sha, utc(when)


def registration(root: Path, plan: Path, runs: Path) -> Registration:
    """A comparison of the plan-file convention: its plan (``docs/study/plans/<comparison>.md``, its amendments
    ``<comparison>-amendment-N.md``) against the first ``started_at`` of its runs (``docs/study/<comparison>.jsonl``).
    Every element is fixed by the plan's first commit when the plan names it (a line naming the element), by an
    amendment's otherwise; an amendment committed after the first run makes the comparison exploratory."""
    name = plan.stem
    rows = [json.loads(line) for line in runs.read_text().splitlines() if line.strip()] if runs.is_file() else []
    starts = [utc(r["started_at"]) for r in rows if r.get("started_at")]
    first = min(starts) if len(starts) == len(rows) and starts else None
    documents = [plan, *sorted(plan.parent.glob(f"{name}-amendment-*.md"))]
    elements: Dict[str, Optional[Tuple[str, datetime]]] = dict.fromkeys(PLAN_ELEMENTS)
    for document in documents:
        added = git(root, "log", "--diff-filter=A", "--format=%H", "--", str(document.relative_to(root)))
        found = commit_time(root, added.split()[-1]) if added and added.split() else None
        text = document.read_text().lower()
        for element in PLAN_ELEMENTS:
            if re.search(rf"\b{element[:5]}", text) and elements[element] is None:
                elements[element] = found
        if document is not plan and found and first and found[1] >= first:  # a late amendment counts against all
            elements = {k: found for k in elements}
    return Registration(name, first, elements)


def study_registrations(root: Path, meta: Optional[dict], summaries: Sequence[dict],
                        files: Dict[str, Sequence[dict]]) -> List[Registration]:
    """The comparisons of ``study_meta.json``'s ``plans`` (each: its runs, by file, tasks, arms and seeds, and the
    commit that fixed each element), then those of ``docs/study/plans/``."""
    found = []
    for plan in (meta or {}).get("plans", []):
        seeds = {t: plan["seeds"][t] if isinstance(plan["seeds"], dict) else plan["seeds"] for t in plan["tasks"]}
        rows = [r for r in files.get(plan["file"], summaries) if r["task"] in plan["tasks"]
                and (not plan.get("arms") or r["arm"] in plan["arms"])
                and seeds[r["task"]][0] <= r["seed"] <= seeds[r["task"]][1]]
        starts = [utc(r["started_at"]).timestamp() if r.get("started_at") else
                  utc(r["finished"]).timestamp() - r["wall_s"] for r in rows if r.get("started_at") or r.get("finished")]
        first = datetime.fromtimestamp(min(starts), timezone.utc) if starts else None
        elements = {k: (commit_time(root, plan["elements"][k]) if plan["elements"].get(k) else None)
                    for k in PLAN_ELEMENTS}
        known = plan.get("outcome_known")
        when = commit_time(root, known["commit"]) if known else None
        found.append(Registration(plan["comparison"], first, elements, when and (*when, known["what"])))
    plans = Path(root) / "docs/study/plans"
    for plan in sorted(plans.glob("*.md")) if plans.is_dir() else []:
        if "-amendment-" not in plan.stem:
            found.append(registration(Path(root), plan, Path(root) / "docs/study" / f"{plan.stem}.jsonl"))
    return found


def registration_lines(root: Path, meta: Optional[dict], summaries: Sequence[dict],
                       files: Dict[str, Sequence[dict]]) -> List[str]:
    found = study_registrations(root, meta, summaries, files)
    if not found:
        return []
    return ["#### Pre-registration, checked", "",
            "A comparison is *confirmatory* only if each element of its plan (arms, seeds, metric, margin, analysis, "
            "family) was committed before the first of its runs started (a run's start: its record's `started_at`, or "
            "its finish time less its wall time), by the commit's time in git; otherwise *exploratory*, and its tests "
            "and intervals are read as such. The plans of the comparisons made before `docs/study/plans/` existed are "
            "the commits named in `study_meta.json` (`plans`, each with its tasks and each task's PPO seeds); those of "
            "`docs/study/plans/<comparison>.md` are the plan's own commit.", "",
            "| comparison | first run started (UTC) | each element: the commit that fixed it | label |",
            "|---|---|---|---|", *(r.text() for r in found), ""]
