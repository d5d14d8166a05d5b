"""Shared fixtures: CPU DeepSpeed, the shipped tokenizer, and a helper to run a stage in-process."""
from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def tokenizer():
    from dschat.utils.model import load_tokenizer

    return load_tokenizer("tiny-gemma")


def read_metrics(run_dir: str) -> list:
    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def last_value(records: list, key: str) -> float:
    return [r[key] for r in records if key in r][-1]
