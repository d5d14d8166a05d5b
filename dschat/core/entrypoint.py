"""Entry-point wrapper: bad input ends with one clear line, not a traceback from deep inside."""
from __future__ import annotations

import argparse
import atexit
import contextlib
import difflib
import logging
import os
import re
import sys
from typing import Callable, Iterable, Iterator

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean X?"`` for the nearest X of ``known`` to a misspelt ``name`` (difflib), else ``""``."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def parser_options(parser: argparse.ArgumentParser) -> set:
    """Every option string of ``parser`` and of its sub-commands."""
    options = {name for name in parser._option_string_actions if name.startswith("--")}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                options |= parser_options(sub)
    return options


def explain_usage_error(message: str, parser: argparse.ArgumentParser) -> str:
    """``message`` with a "did you mean" for each unrecognized ``--flag`` in it that is near a real one."""
    match = re.match(r"unrecognized arguments: (.*)", message)
    if not match:
        return message
    options = parser_options(parser)
    flags = [token.split("=")[0] for token in match.group(1).split() if token.startswith("--")]
    return message + "".join(did_you_mean(flag, options).replace("; did", f"; {flag}: did") for flag in flags)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` as every command line of the project uses it: no abbreviations (``--learning_rat`` is an
    unknown flag, as the same key in a YAML config is), a "did you mean" for a near-miss flag, and the help text
    laid out as written."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str):
        super().error(explain_usage_error(message, self))


class TqdmLoggingHandler(logging.Handler):
    """Writes each record with ``tqdm.write`` (to stderr), which lifts any open progress bar first: a log line
    never lands on the end of a bar's line (``...11.58it/s]step 150 | ...``)."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm.auto import tqdm  # not at import: flag errors and --help answer without it

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
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # each hub retry otherwise logs two lines


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout — by Python code, libraries' loggers that hold ``sys.stdout`` (DeepSpeed's
    accelerator warning) and C code alike — to stderr, so a tool whose stdout is one value for ``$(...)`` prints
    only that value."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


DEFAULT_THREADS = 1
"""Intra-op CPU threads per process unless ``MARLHF_THREADS`` (or ``OMP_NUM_THREADS``) says otherwise; the same
default as ``scripts/threads.sh``, which the demo, the launchers and the reproduce scripts source."""


def apply_thread_default() -> int:
    """Set OpenMP/MKL (and torch's, if already imported) intra-op threads to ``MARLHF_THREADS``, else
    ``OMP_NUM_THREADS``, else :data:`DEFAULT_THREADS`, so an entry point run without the scripts never spins a
    shared machine's cores either; returns the count."""
    text = os.environ.get("MARLHF_THREADS") or os.environ.get("OMP_NUM_THREADS") or str(DEFAULT_THREADS)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"MARLHF_THREADS {text}: expected a positive integer")
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = text
    torch = sys.modules.get("torch")
    if torch is not None:  # the environment is read when the OpenMP runtime loads: too late for this process
        torch.set_num_threads(int(text))
    return int(text)


def release_process_group() -> None:
    """Destroy torch.distributed's process groups when a process whose run ended well exits (``atexit``, while the
    interpreter is still whole). Left to the interpreter's teardown, gloo's worker threads can abort the process
    (SIGABRT, "terminate called without an active exception", pytorch/pytorch#190489: seen in one rank of a
    two-process run on loaded cores). Not after an error: a rank that failed while another waits in a collective
    could hang in the teardown (pytorch/torchtitan#1342)."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()


def run_cli(main: Callable[[], object]) -> None:
    """Run ``main``; a ValueError/FileNotFoundError (our errors for bad flags, files, rows) or a RunStopped (a
    non-finite loss, a full disk) prints ``error: <message>`` and exits 2; a run stopped by SIGTERM / SIGINT
    after saving its checkpoint prints ``stopped: <message>`` and exits 128 + the signal number (143, 130).
    ``MARLHF_DEBUG=1`` shows the full traceback instead. Threads: :func:`apply_thread_default`."""
    setup_logging()
    try:
        apply_thread_default()
        main()
        atexit.register(release_process_group)  # at exit, not now: a caller may run another stage in-process
    except Exception as err:  # noqa: BLE001 -- re-raised below unless it is one of ours
        faults = sys.modules.get("dschat.training.faults")  # these exist only once a run has imported them
        if faults and isinstance(err, faults.RunInterrupted):  # a checkpoint was written: the run did not finish
            print(f"stopped: {err}", file=sys.stderr)
            sys.exit(err.exit_status)
        ours = (ValueError, FileNotFoundError) + ((faults.RunStopped,) if faults else ())
        if not isinstance(err, ours) or os.environ.get("MARLHF_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
