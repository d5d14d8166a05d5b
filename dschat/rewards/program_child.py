"""The program child: the process that runs the untrusted program (see ``docs/sandbox-threat-model.md``). It
trusts only its sealed spec file (written by the parent before it was forked) and, until it hardens itself, the
code it was forked with; from :func:`main`'s first report on it applies every isolation layer
(:mod:`.isolation`) before it compiles the program, and from then on nothing in this process is trusted by anyone:
the parent checks each report, and the verdicts are decided elsewhere (the parent, or the verdict child). The
test drivers it runs are :mod:`.program_drivers`.

Loaded once by a program fork server (``fork_server.py``, ``python -I -S``) and run as :func:`main` in each child
it forks for :func:`~dschat.rewards.sandbox.run_program`, given the descriptor of a sealed memory file: everything
else (the program, the limits, the descriptors of the channels, the report key) is read from that file before the
program runs, and never from the program's working directory; each test's input (standard input, or a call's
arguments as JSON) is read from the input memory file, which holds that one test's input only. Kept apart from
the parent's modules and limited to light standard-library imports (its own modules beside it): the fork server
and every child it forks hold them.
"""
from __future__ import annotations

import builtins
import json
import math
import os
import sys

if __package__:
    from . import isolation, program_drivers
else:  # loaded by the fork server from its file (python -I: its own directory is not on sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import isolation
    import program_drivers
    del sys.path[0]

SOLUTION_FILENAME = "<solution>"
PRELUDE_FILENAME = "<prelude>"


def read_spec(spec_fd: int) -> dict:
    """The spec the parent wrote into the sealed memory file ``spec_fd`` (read with ``pread``: the file offset
    is shared with the parent's descriptor), then closed."""
    chunks = []
    offset = 0
    while chunk := os.pread(spec_fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    os.close(spec_fd)
    return json.loads(b"".join(chunks))


def main(spec_fd: int) -> None:
    """Harden, compile, run tests ``first_test..`` and report each; ``os._exit`` so no program hook runs."""
    spec = read_spec(spec_fd)
    sys.path[:] = spec["sys_path"]
    sys.dont_write_bytecode = True
    builtins.exit = builtins.quit = _quit
    channel = _Channel(spec["report_fd"], spec["report_key"])
    fds = program_drivers.Descriptors(spec["input_fd"], spec["output_fd"], spec["ack_fd"],
                                      os.open(os.devnull, os.O_RDWR))
    first_test = spec["first_test"]
    cpu_seconds = math.ceil(spec["limits"]["test_timeout_s"] * (spec["num_tests"] - first_test + 1)) + 1
    channel.send(event="hardened", layers=isolation.harden(spec["workdir"], spec["readable_paths"], spec["limits"],
                                                           cpu_seconds, spec["task_bound"]))
    try:
        program = compile(spec["source"], SOLUTION_FILENAME, "exec", dont_inherit=True)
    except Exception as error:  # SyntaxError, null bytes, nesting too deep for the compiler, ...
        channel.send(event="compile_error", error=program_drivers.describe_exception(error))
        os._exit(0)
    prelude = compile(spec["prelude"], PRELUDE_FILENAME, "exec", dont_inherit=True)
    sys.argv = ["solution.py"]
    sys.modules["__main__"] = type(sys)("__main__")  # `import __main__` no longer reaches this module
    if spec["mode"] == "humaneval":  # the parent hears nothing more from this process: the verdict is not here
        channel.send(event="ready")
        os.close(spec["report_fd"])
        program_drivers.humaneval_server(prelude, program, spec, fds)
        os._exit(0)
    run_test = program_drivers.DRIVERS[spec["mode"]](prelude, program, spec, fds)
    state = program_drivers.InterpreterState()
    channel.send(event="ready")
    for index in range(first_test, spec["num_tests"]):
        if index > first_test and not fds.wait_for_ack():
            break  # the parent is gone or stopped this child
        _truncate_stderr()
        fds.clear_output()
        status, error, in_tests = run_test(index)
        program_drivers.join_user_threads()
        status, error = program_drivers.flush_user_streams(status, error)
        state.restore()
        channel.send(event="test", index=index, status=status, error=error, in_tests=in_tests)
    os._exit(0)


def _truncate_stderr() -> None:
    """Each test gets the whole stderr budget (``RLIMIT_FSIZE``); a crash report needs only its own test's."""
    try:
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
    except OSError:  # the program closed or replaced fd 2
        pass


def _quit(code=None):
    """``exit``/``quit`` as the site module (not loaded in the child) would define them."""
    raise SystemExit(code)


class _Channel:
    """The write end of the report pipe; functions bound now, so a program that patches ``os`` or ``json``
    breaks only its own report (which the parent then treats as a crash). Every report carries the key the
    parent gave this child, so that forging one takes finding the key in the interpreter, not just writing to
    a descriptor."""

    def __init__(self, fd: int, key: str):
        self._fd = fd
        self._key = key
        self._write = os.write
        self._dumps = json.dumps

    def send(self, **fields) -> None:
        data = (self._dumps(dict(fields, key=self._key)) + "\n").encode("utf-8")
        while data:
            data = data[self._write(self._fd, data):]
