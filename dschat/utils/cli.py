"""Entry-point wrapper: bad input ends with one clear line, not a traceback from deep inside."""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable


def setup_logging() -> None:
    logging.basicConfig(level=os.environ.get("MARLHF_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("DeepSpeed", "deepspeed", "torch.distributed", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_cli(main: Callable[[], object]) -> None:
    """Run ``main``; a ValueError/FileNotFoundError (our errors for bad flags, files, rows) or a RunStopped (a
    non-finite loss, a full disk) prints ``error: <message>`` and exits 2. ``MARLHF_DEBUG=1`` shows the full
    traceback instead."""
    from .faults import RunStopped

    setup_logging()
    try:
        main()
    except (ValueError, FileNotFoundError, RunStopped) as err:
        if os.environ.get("MARLHF_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
