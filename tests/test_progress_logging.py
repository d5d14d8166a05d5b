"""Log lines and metric lines are written through tqdm, so they never land on the end of a progress bar's line
(issue: ``…11.58it/s]step 150 | sft/loss=…``). stdout and stderr share one stream here, as on a terminal."""
from __future__ import annotations

import contextlib
import io
import logging
import re
import sys

from tqdm import tqdm

from dschat.core.entrypoint import TqdmLoggingHandler, setup_logging
from dschat.training.metrics import MetricLogger


@contextlib.contextmanager
def terminal(monkeypatch):
    """One stream behind both sys.stdout and sys.stderr (inside the test body: pytest's capture resets them
    between setup and call), and an open progress bar drawn on it."""
    stream = io.StringIO()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", stream)
        patch.setattr(sys, "stderr", stream)
        bar = tqdm(total=10, desc="sft", file=stream, mininterval=0)
        bar.update(3)
        yield stream
        bar.close()


def line_starts(text: str, message: str) -> bool:
    """``message`` begins a line: after a newline, or after the carriage return with which tqdm clears its bar,
    never after a bar's ``...]``."""
    return re.search(r"(^|[\r\n])" + re.escape(message), text) is not None and \
        re.search(r"[\]|]" + re.escape(message), text) is None


def test_metric_lines_do_not_glue_to_a_progress_bar(monkeypatch, tmp_path):
    with terminal(monkeypatch) as stream:
        metrics = MetricLogger(str(tmp_path))
        metrics.log(150, {"sft/loss": 1.25})
        metrics.close()
    out = stream.getvalue()
    assert "it/s]" in out or "s/it]" in out  # the bar was drawn before the line
    assert line_starts(out, "step 150 | sft/loss=1.25")


def test_log_records_do_not_glue_to_a_progress_bar(monkeypatch):
    root = logging.getLogger()
    before = list(root.handlers)
    monkeypatch.setattr(root, "handlers", [])  # an unconfigured process (pytest installs its own handlers)
    try:
        with terminal(monkeypatch) as stream:
            setup_logging()
            setup_logging()  # idempotent: one handler
            added = [h for h in root.handlers if isinstance(h, TqdmLoggingHandler)]
            assert len(added) == 1
            logging.getLogger("dschat.test").info("saved checkpoint")
        out = stream.getvalue()
        assert re.search(r"(^|[\r\n])\d\d:\d\d:\d\d INFO dschat.test: saved checkpoint\n", out)
        assert re.search(r"[\]|]\d\d:\d\d:\d\d INFO", out) is None
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
    assert root.handlers == []
