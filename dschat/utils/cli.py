"""Entry-point wrapper: bad input ends with one clear line, not a traceback from deep inside."""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable

from tqdm.auto import tqdm

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TqdmLoggingHandler(logging.Handler):
    """Writes each record with ``tqdm.write`` (to stderr), which lifts any open progress bar first: a log line
    never lands on the end of a bar's line (``...11.58it/s]step 150 | ...``)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 -- logging's own convention
            self.handleError(record)


def setup_logging() -> None:
    """INFO (``MARLHF_LOG_LEVEL``) to stderr through :class:`TqdmLoggingHandler`, unless logging is configured
    already (as ``logging.basicConfig`` does: e.g. under pytest, whose handlers capture the records)."""
    root = logging.getLogger()
    root.setLevel(os.environ.get("MARLHF_LOG_LEVEL", "INFO"))
    if not root.handlers:
        handler = TqdmLoggingHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S"))
        root.addHandler(handler)
    for noisy in ("DeepSpeed", "deepspeed", "torch.distributed", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_cli(main: Callable[[], object]) -> None:
    """Run ``main``; a ValueError/FileNotFoundError (our errors for bad flags, files, rows) or a RunStopped (a
    non-finite loss, a full disk) prints ``error: <message>`` and exits 2; a run stopped by SIGTERM / SIGINT
    after saving its checkpoint prints ``stopped: <message>`` and exits 128 + the signal number (143, 130).
    ``MARLHF_DEBUG=1`` shows the full traceback instead."""
    from .faults import RunInterrupted, RunStopped

    setup_logging()
    try:
        main()
    except RunInterrupted as err:  # a checkpoint was written: not an error, but the run did not finish
        print(f"stopped: {err}", file=sys.stderr)
        sys.exit(err.exit_status)
    except (ValueError, FileNotFoundError, RunStopped) as err:
        if os.environ.get("MARLHF_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
