"""Metrics to the console, TensorBoard and ``metrics.jsonl`` (main process only)."""
from __future__ import annotations

import json
import math
import os
from typing import Mapping, Optional

from tqdm.auto import tqdm

from .distributed import is_main_process


def _format(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class MetricLogger:
    """Log scalar dictionaries per step. ``metrics.jsonl`` is what the evaluation scripts read curves from. The
    console line goes through ``tqdm.write``, so it never lands on the end of a progress bar's line."""

    def __init__(self, output_dir: str, tensorboard_dir: Optional[str] = None, print_fn=tqdm.write):
        self.enabled = is_main_process()
        self.print_fn = print_fn
        self.writer = None
        self.jsonl = None
        if self.enabled:
            from torch.utils.tensorboard import SummaryWriter

            os.makedirs(output_dir, exist_ok=True)
            self.writer = SummaryWriter(tensorboard_dir or os.path.join(output_dir, "tensorboard"))
            self.jsonl = open(os.path.join(output_dir, "metrics.jsonl"), "a")

    def log(self, step: int, metrics: Mapping[str, float], console: bool = True) -> None:
        if not self.enabled:
            return
        clean = {key: float(value) for key, value in metrics.items()}
        for key, value in clean.items():
            if math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        if console:
            self.print_fn(f"step {step} | " + " | ".join(f"{k}={_format(v)}" for k, v in clean.items()))

    def log_text(self, step: int, tag: str, text: str) -> None:
        if self.enabled:
            self.writer.add_text(tag, text, step)

    def close(self) -> None:
        if self.enabled:
            self.writer.close()
            self.jsonl.close()
