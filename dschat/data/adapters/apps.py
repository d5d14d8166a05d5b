"""APPS program synthesis (Hendrycks et al., 2021): ``codeparrot/apps``.

Hub row schema::

    {"problem_id": int, "question": str, "solutions": str, "input_output": str, "difficulty": str,
     "url": str, "starter_code": str}

``solutions`` is a JSON list of Python programs; ``input_output`` a JSON object
``{"inputs": [...], "outputs": [...], "fn_name"?: str}`` (with ``fn_name``: call-based tests whose inputs
are argument lists; without: standard-input strings). Either may be the empty string (no solutions / no
tests; kept here, with empty lists: SFT can use a problem without tests, and the phase split runs over all
problems; PPO and evaluation drop tasks without tests, counted and logged, see
:func:`dschat.data.loading.tasks_with_tests`). A row whose JSON does not parse is skipped, counted
and logged by problem_id. Splits: ``train`` (5,000 problems); ``validation`` and ``test`` read the hub
``test`` split (5,000; Table 4: 5k / 5k). The repository's loading script no longer runs under current
``datasets``, so its ``train.jsonl`` / ``test.jsonl`` are read directly, at commit :data:`REVISION` (the
hub's Parquet-conversion bot could otherwise delete them from ``main``).

``load_code_tasks`` gives one :class:`CodeTask` per row (prompt in the Hendrycks et al. format, see
:mod:`dschat.data.formats`); ``load_pairs`` gives SFT pairs (prompt, first reference solution) for
tasks that have one.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Optional

from ..errors import SkipCounter, row_error
from ..formats import apps_prompt
from ..hub import DatasetSource
from ..options import DataOptions
from ..records import read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import CodeTask, PreferencePair
from .common import SkipRow, convert_rows

logger = logging.getLogger(__name__)

# main: "update metadata" (2022-10-20), the last commit on main (read from the hub's pages and corroborated by
# several public projects that pin the same commit).
REVISION = "21e74ddf8de1a21436da12e3e653065c5213e9d1"
SOURCE = DatasetSource("codeparrot/apps", splits={"train": "train", "validation": "test", "test": "test"},
                       repo="codeparrot/apps", revision=REVISION,
                       files={split: f"{split}.jsonl" for split in ("train", "test")})
SCHEMA = "apps rows: problem_id, question, solutions, input_output, difficulty, starter_code"


def load_apps_tasks(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                    options: DataOptions = DataOptions()) -> List[CodeTask]:
    source, rows = read_rows(SOURCE, split, data_path, eval_data_path, options.eval_holdout)
    return convert_rows(rows, source, apps_task, logger)


def load_apps_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                    options: DataOptions = DataOptions()) -> List[PreferencePair]:
    return solution_pairs(load_apps_tasks(split, data_path, eval_data_path, options))


def solution_pairs(tasks: List[CodeTask]) -> List[PreferencePair]:
    """(prompt, first reference solution) for every task that has one; the others are counted and logged."""
    skips = SkipCounter("apps SFT pairs")
    pairs = []
    for task in tasks:
        if task.solutions and task.solutions[0].strip():
            pairs.append(PreferencePair(prompt=task.prompt, chosen=task.solutions[0]))
        else:
            skips.skip("no reference solution", f"problem_id {task.task_id}")
    skips.log_summary(logger, len(tasks))
    return pairs


def apps_task(record: Dict[str, Any], source: str, number: int) -> CodeTask:
    problem_id = require_field(record, "problem_id", (int, str), source, number, SCHEMA)
    question = require_field(record, "question", str, source, number, SCHEMA)
    starter_code = record.get("starter_code") or ""
    solutions = parse_json_field(record, "solutions", list, problem_id, source, number)
    tests = parse_json_field(record, "input_output", dict, problem_id, source, number)
    fn_name = tests.get("fn_name") or None
    return CodeTask(
        task_id=str(problem_id),
        prompt=apps_prompt(question, starter_code, fn_name),
        question=question,
        starter_code=starter_code,
        fn_name=fn_name,
        inputs=tests.get("inputs", []),
        outputs=tests.get("outputs", []),
        difficulty=record.get("difficulty") or "unknown",
        solutions=solutions,
    )


def parse_json_field(record: Dict[str, Any], key: str, expected_type, problem_id, source: str, number: int):
    """The JSON-in-a-string field decoded; "" decodes to empty; bad JSON is a counted skip naming problem_id."""
    text = require_field(record, key, str, source, number, SCHEMA)
    if not text.strip():
        return expected_type()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise SkipRow(f"bad JSON in {key}", f"problem_id {problem_id}") from None
    if not isinstance(value, expected_type):
        raise row_error(source, number, f"{key} should decode to a JSON {expected_type.__name__}, "
                                        f"got {type(value).__name__} (problem_id {problem_id})")
    return value


register(DatasetAdapter(name="apps", load_pairs=load_apps_pairs,
                        load_code_tasks=load_apps_tasks, pairs_from_tasks=solution_pairs))
