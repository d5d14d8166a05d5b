"""Metrics to the console, TensorBoard and ``metrics.jsonl`` (main process only)."""
from __future__ import annotations

import json
import math
import os
from typing import Mapping, Optional, Sequence

from tqdm.auto import tqdm

from dschat.core.distributed import is_main_process


WANDB_RUN_ID = "wandb_run_id"
"""File in the output directory holding the Weights & Biases run id, so a resumed run logs to the same run."""


def start_wandb(output_dir: str, run_config: Optional[dict] = None):
    """A Weights & Biases run for ``output_dir`` (project ``$WANDB_PROJECT``, default ma-rlhf; ``WANDB_MODE=offline``
    writes it under ``output_dir/wandb`` without a network), resumed when the directory has one already."""
    import wandb

    id_path = os.path.join(output_dir, WANDB_RUN_ID)
    run_id = open(id_path).read().strip() if os.path.exists(id_path) else None
    run = wandb.init(project=os.environ.get("WANDB_PROJECT", "ma-rlhf"), dir=output_dir, id=run_id, resume="allow",
                     name=os.path.basename(os.path.normpath(output_dir)), config=run_config)
    with open(id_path, "w") as handle:
        handle.write(run.id)
    return run


def _format(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class MetricLogger:
    """Log scalar dictionaries per step. ``metrics.jsonl`` is what the evaluation scripts read curves from; the
    ``report_to`` sinks (``tensorboard``, ``wandb``; ``none``) get the same scalars. The console line goes through
    ``tqdm.write``, so it never lands on the end of a progress bar's line."""

    def __init__(self, output_dir: str, tensorboard_dir: Optional[str] = None, print_fn=tqdm.write,
                 report_to: Sequence[str] = ("tensorboard",), run_config: Optional[dict] = None):
        self.enabled = is_main_process()
        self.print_fn = print_fn
        self.writer = None
        self.wandb = None
        self.jsonl = None
        self.jsonl_path = os.path.join(output_dir, "metrics.jsonl")
        self.tensorboard_dir = tensorboard_dir or os.path.join(output_dir, "tensorboard")
        self.resumed_step = None
        if self.enabled:
            os.makedirs(output_dir, exist_ok=True)
            if "tensorboard" in report_to:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(self.tensorboard_dir)
            if "wandb" in report_to:
                self.wandb = start_wandb(output_dir, run_config)
            self.jsonl = open(self.jsonl_path, "a")

    def resume_at(self, step: int) -> None:
        """The run resumed from its step-``step`` checkpoint: rows of later steps (logged before the
        interruption, about to be re-run) are removed from ``metrics.jsonl`` and TensorBoard, rows for steps up
        to ``step`` are not logged again (and a copy already re-logged, e.g. the step-0 evaluation, is
        dropped), so the file reads as one uninterrupted run."""
        self.resumed_step = step
        if not self.enabled:
            return
        from torch.utils.tensorboard import SummaryWriter

        self.jsonl.close()
        kept, seen = [], set()
        with open(self.jsonl_path) as handle:
            for line in filter(str.strip, handle):
                row = json.loads(line)
                key = (row["step"], tuple(sorted(row)))
                if row["step"] <= step and key not in seen:
                    seen.add(key)
                    kept.append(line)
        tmp = self.jsonl_path + ".tmp"
        with open(tmp, "w") as handle:
            handle.writelines(kept)
        os.replace(tmp, self.jsonl_path)
        self.jsonl = open(self.jsonl_path, "a")
        if self.writer is not None:
            self.writer.close()
            self.writer = SummaryWriter(self.tensorboard_dir, purge_step=step + 1)

    def log(self, step: int, metrics: Mapping[str, float], console: bool = True) -> None:
        if not self.enabled or (self.resumed_step is not None and step <= self.resumed_step):
            return
        clean = {key: float(value) for key, value in metrics.items()}
        finite = {key: value for key, value in clean.items() if math.isfinite(value)}
        if self.writer is not None:
            for key, value in finite.items():
                self.writer.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(finite, step=step)
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        if console:
            self.print_fn(f"step {step} | " + " | ".join(f"{k}={_format(v)}" for k, v in clean.items()))

    def log_record(self, step: int, record: Mapping[str, object]) -> None:
        """A row of JSON values (not scalars) in ``metrics.jsonl`` and TensorBoard text, logged even at a step a
        resumed run does not re-log (e.g. the configuration changes accepted at the resumed step)."""
        if not self.enabled:
            return
        self.jsonl.write(json.dumps({"step": step, **record}) + "\n")
        self.jsonl.flush()
        for key, value in record.items():
            self.writer.add_text(key, str(value), step)

    def log_text(self, step: int, tag: str, text: str) -> None:
        if self.enabled and (self.resumed_step is None or step > self.resumed_step):
            if self.writer is not None:
                self.writer.add_text(tag, text, step)
            if self.wandb is not None:
                self.wandb.log({tag: text}, step=step)

    def close(self) -> None:
        if self.enabled:
            if self.writer is not None:
                self.writer.close()
            if self.wandb is not None:
                self.wandb.finish()
            self.jsonl.close()
