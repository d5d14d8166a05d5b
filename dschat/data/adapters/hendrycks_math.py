"""MATH competition problems (Hendrycks et al., 2021), ``--data_name math``: ``EleutherAI/hendrycks_math``, the
maintained Parquet copy (the original ``hendrycks/competition_math`` was taken down).

Read from the repository's Parquet files at commit :data:`REVISION`, one configuration per subject
(:data:`SUBJECTS`): ``{subject}/train-00000-of-00001.parquet`` (7,500 problems in all) and
``{subject}/test-00000-of-00001.parquet`` (5,000), the subjects read in order and concatenated;
``validation`` and ``test`` read the hub ``test`` split. Row schema:
``{"problem": str, "level": str, "type": str, "solution": str}``; the solution's final answer is its last
``\\boxed{...}``.

Each row becomes a pair for SFT and for ``--reward verifier`` (no ``rejected``)::

    prompt:  "Problem: {problem}\\nSolution:"
    chosen:  " {solution}"

and the verifier (``dschat.rewards.verify_answer``, math-verify) compares a response's final answer with the
solution's boxed one. A row whose solution has no ``\\boxed`` answer is a one-line error naming it.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import row_error
from ..hub import DatasetSource
from ..options import DataOptions
from ..records import read_rows, require_field
from ..registry import DatasetAdapter, register
from ..schema import PreferencePair
from .common import convert_rows

logger = logging.getLogger(__name__)

# main: the commit several public projects pin (read offline from their sources).
REVISION = "21a5633873b6a120296cce3e2df9d5550074f4a3"
SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
            "prealgebra", "precalculus")
SOURCES = tuple(DatasetSource("EleutherAI/hendrycks_math", splits={"train": "train", "validation": "test",
                                                                    "test": "test"},
                              repo="EleutherAI/hendrycks_math", revision=REVISION,
                              files={split: f"{subject}/{split}-00000-of-00001.parquet" for split in ("train", "test")})
                for subject in SUBJECTS)
SCHEMA = "hendrycks_math rows: problem, level, type, solution (with a \\boxed{} final answer)"


def load_math_pairs(split: str = "train", data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                    options: DataOptions = DataOptions()) -> List[PreferencePair]:
    """Every subject's pairs of ``split``, subject after subject. A ``data_path`` file (not a mirror directory)
    holds all subjects' rows in this schema."""
    sources = SOURCES[:1] if data_path is not None and not Path(data_path).is_dir() else SOURCES
    pairs: List[PreferencePair] = []
    for source in sources:
        label, rows = read_rows(source, split, data_path, eval_data_path, options.eval_holdout)
        pairs += convert_rows(rows, label, math_pair, logger)
    return pairs


def math_pair(record: Dict[str, Any], source: str, number: int) -> PreferencePair:
    problem = require_field(record, "problem", str, source, number, SCHEMA)
    solution = require_field(record, "solution", str, source, number, SCHEMA)
    if "\\boxed" not in solution and "\\fbox" not in solution:
        raise row_error(source, number, "the solution has no \\boxed{...} final answer; a reference without an "
                                        "answer cannot be verified")
    return PreferencePair(prompt=f"Problem: {problem.strip()}\nSolution:", chosen=" " + solution.strip(),
                          origin=f"{source}, row {number}")


register(DatasetAdapter(name="math", load_pairs=load_math_pairs, answer_task="math"))
