"""Process isolation for running generated programs (execution reward of Appendix B.5, pass@k of §4.5).

The parent (the trainer or the evaluator) never executes generated code. :func:`run_program` writes the
program and its test inputs into a fresh private directory and starts ``python -I -S sandbox_child.py`` in a
new session (its own process group). The child hardens itself, compiles the program, runs the tests one after
the other in the same interpreter and reports each one on a pipe. The parent enforces a wall-clock deadline
per test, kills the whole process group (``os.killpg``) when one expires or the child dies, and carries on
with the remaining tests in a fresh child. What one test could leave behind for the next is reset after every
test (builtins, standard streams, ``sys.argv``, recursion and int-digit limits, trace hooks, signal handlers
and interval timers, working directory), and a child whose program leaves daemon threads running is replaced,
so verdicts match one process per test at the cost of one interpreter start per program (a call-based
program's module is loaded once per child and shared by its calls, as in APPS' harness).

What the child enforces on itself before it touches the program (``ProgramRun.isolation`` lists the layers
that were actually applied):

* wall clock: per test, by the parent (deadline counted from the child's previous report); on expiry the
  process group gets SIGKILL and the test is ``TIMED_OUT``;
* CPU time: ``RLIMIT_CPU`` (the child's whole test budget plus 1 s; SIGXCPU counts as a timeout);
* memory: ``RLIMIT_AS``; open files: ``RLIMIT_NOFILE``; no core dumps;
* output: each test's stdout and stderr (emptied at each test) are files in the private directory capped by
  ``RLIMIT_FSIZE`` (writes beyond it fail with EFBIG); the parent reads at most ``max_output_bytes``;
* stdin: the test input as a file, or ``/dev/null`` - never a pipe a program could wait on forever;
* processes: seccomp (x86-64) denies fork, vfork, clone without ``CLONE_THREAD`` (threads still work),
  clone3 (ENOSYS, so glibc falls back to clone), execve and execveat;
* network: seccomp denies ``socket()``; Landlock (ABI >= 4) denies TCP bind and connect;
* filesystem: Landlock lets the program read and execute everywhere but write, create, rename or remove only
  beneath its private directory (also its cwd, HOME and TMPDIR) - writes to /tmp fail too;
* signals: seccomp allows kill, tkill, tgkill and rt_(tg)sigqueueinfo only towards the child itself;
  Landlock (ABI >= 6) additionally scopes signals and abstract UNIX sockets to the sandbox;
* privileges: ``no_new_privs`` and every capability dropped (effective, permitted, inheritable, bounding
  set), so even a root trainer's child cannot raise its limits or override file permissions; seccomp also
  denies mount, ptrace, unshare, setns, bpf, io_uring, perf events, kexec, module loading, reboot, clock
  setting and raising resource limits.

What is not enforced:

* reading: the program may read any file the trainer's uid can read (a data set's expected outputs
  included); with no network it can only print what it reads into its own output;
* disk: each file is capped, the number of files is not: a program can write into its private directory
  until its time runs out (the directory is deleted afterwards);
* verdict forgery: as in the APPS and HumanEval harnesses the test driver shares the interpreter with the
  program, so a deliberately hostile program could write fake reports on the pipe; this contains accidents and
  resource abuse, it is not a defence against a program written to forge its own score;
* seccomp is installed on x86-64 only and Landlock needs Linux >= 5.13. Without seccomp (another
  architecture, or ``SandboxLimits(syscall_filters=False)``) fork, exec and sockets are blocked only at the
  Python level (``os.fork``, ``subprocess.Popen``, ``socket.socket``... replaced), which ctypes bypasses, and
  ``RLIMIT_NPROC`` bounds processes per uid (the kernel ignores it for root); the process-group kill still
  reaps every forked process that stays in the group.
"""
from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Callable, Dict, List, Optional, Tuple

from . import sandbox_child
from .sandbox_child import SPEC_FILE, STDERR_FILE, input_path, output_path

SANDBOX_SCRIPT = os.path.abspath(sandbox_child.__file__)
_MAX_EVENT_BYTES = 1 << 20
_STDERR_TAIL_BYTES = 2000
_EXIT_GRACE_S = 1.0


class ProgramMode(str, Enum):
    """How the tests drive the program: APPS standard-io, APPS call-based, or a HumanEval ``check``."""

    STDIO = "stdio"
    CALL = "call"
    HUMANEVAL = "humaneval"


class RunStatus(str, Enum):
    """How one test's run ended, before any comparison with the expected output."""

    RETURNED = "returned"  # ran to its end (standard-io: exit status 0)
    RAISED = "raised"  # an uncaught exception, or a non-zero exit status
    CRASHED = "crashed"  # the process died (a signal, an exit in the middle of a call, a broken report)
    TIMED_OUT = "timed_out"  # wall-clock deadline or CPU-time limit


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed program; see the module docstring for what each one enforces.

    test_timeout_s: wall-clock seconds per test (APPS' harness uses 4, HumanEval's 3); compiling the program
        gets the same budget.
    startup_timeout_s: seconds for the interpreter to start and harden itself (not the program's time: on
        expiry :class:`SandboxError` is raised).
    memory_bytes: address-space limit (``RLIMIT_AS``) of the child.
    max_output_bytes: cap on each test's stdout, on a call's serialised return value and on any file the
        program writes (``RLIMIT_FSIZE``).
    max_processes: ``RLIMIT_NPROC``, set only where seccomp is not installed (it counts all processes of the
        uid and is ignored for root).
    syscall_filters: install Landlock and seccomp; False leaves rlimits and the Python-level guard only.
    tmp_root: where private directories are created (default: the system temporary directory).
    """

    test_timeout_s: float = 4.0
    startup_timeout_s: float = 30.0
    memory_bytes: int = 2 << 30
    max_output_bytes: int = 8 << 20
    max_open_files: int = 256
    max_processes: int = 32
    syscall_filters: bool = True
    tmp_root: Optional[str] = None


@dataclass(frozen=True)
class ProgramSpec:
    """A program and the inputs of its tests.

    STDIO: ``stdin_inputs[i]`` is test i's standard input. CALL: ``call_args[i]`` are test i's positional
    arguments to ``fn_name`` (a top-level function, or a method of a top-level ``Solution`` class).
    HUMANEVAL: one test, ``test_code`` then ``check(entry_point)`` run after the program. ``prelude``: trusted
    code run in the program's namespace just before it (APPS' import header).
    """

    mode: ProgramMode
    source: str
    prelude: str = ""
    stdin_inputs: Tuple[str, ...] = ()
    call_args: Tuple[list, ...] = ()
    fn_name: Optional[str] = None
    test_code: Optional[str] = None
    entry_point: Optional[str] = None

    @property
    def num_tests(self) -> int:
        if self.mode is ProgramMode.STDIO:
            return len(self.stdin_inputs)
        if self.mode is ProgramMode.CALL:
            return len(self.call_args)
        return 1


@dataclass(frozen=True)
class TestRun:
    """One test's run. ``output``: stdout (STDIO) or the JSON-serialised return value (CALL), at most
    ``max_output_bytes``. ``raised_in_tests``: the exception came out of the test code's own frames (a
    HumanEval assertion about a returned value) rather than out of the program."""

    __test__ = False  # not a pytest test class

    index: int
    status: RunStatus
    output: bytes = b""
    error: str = ""
    raised_in_tests: bool = False


@dataclass(frozen=True)
class ProgramRun:
    """Everything one program did: a compile error (no tests run) or the runs of the tests that ran (all of
    them unless the ``on_test`` callback stopped early), and the isolation layers the child applied."""

    compile_error: Optional[str]
    tests: Tuple[TestRun, ...]
    isolation: Tuple[str, ...]


class SandboxError(RuntimeError):
    """The sandbox itself failed (the child interpreter did not start): not the program's fault."""


def _continue_always(run: TestRun) -> bool:
    return True


def run_program(spec: ProgramSpec, limits: SandboxLimits = SandboxLimits(),
                on_test: Callable[[TestRun], bool] = _continue_always) -> ProgramRun:
    """Run ``spec``'s program on its tests in isolated children; ``on_test`` sees each finished test and
    returns whether to go on (the remaining tests are then not run)."""
    if spec.num_tests < 1:
        raise ValueError("a program needs at least one test")
    with tempfile.TemporaryDirectory(prefix="dschat-sandbox-", dir=limits.tmp_root,
                                     ignore_cleanup_errors=True) as workdir:
        _write_workdir(workdir, spec, limits)
        runs: List[TestRun] = []
        isolation: Tuple[str, ...] = ()
        next_test = 0
        while next_test < spec.num_tests:
            child = _run_child(workdir, next_test, spec, limits, on_test)
            isolation = child.isolation or isolation
            if child.compile_error is not None:
                return ProgramRun(child.compile_error, (), isolation)
            runs.extend(child.runs)
            if child.stopped:
                break
            next_test = child.next_test
        return ProgramRun(None, tuple(runs), isolation)


# ----------------------------------------------------------------------------------------------- parent side


def _write_workdir(workdir: str, spec: ProgramSpec, limits: SandboxLimits) -> None:
    """The spec file the child reads and one input file per standard-io test."""
    child_spec = {
        "mode": spec.mode.value, "source": spec.source, "prelude": spec.prelude, "num_tests": spec.num_tests,
        "call_args": list(spec.call_args), "fn_name": spec.fn_name,
        "test_code": spec.test_code, "entry_point": spec.entry_point, "limits": asdict(limits),
        "sys_path": [entry for entry in sys.path if os.path.isabs(entry)],
    }
    with open(os.path.join(workdir, SPEC_FILE), "w", encoding="utf-8") as spec_file:
        json.dump(child_spec, spec_file)
    for index, stdin_text in enumerate(spec.stdin_inputs):
        with open(input_path(workdir, index), "w", encoding="utf-8", newline="") as input_file:
            input_file.write(stdin_text)


def _child_environment(workdir: str) -> Dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }


def _child_command(workdir: str, channel_fd: int, first_test: int) -> List[str]:
    # The trainer's own interpreter. -I: no PYTHON* variables, no user site, no script directory on sys.path;
    # -S: no site module (half the start-up time; the child takes the parent's sys.path instead). Unlimited
    # int<->str digits, as in the Python versions APPS solutions were written for.
    return [sys.executable, "-I", "-S", "-X", "int_max_str_digits=0", SANDBOX_SCRIPT,
            workdir, str(channel_fd), str(first_test)]


@dataclass
class _ChildResult:
    runs: List[TestRun]
    next_test: int
    isolation: Tuple[str, ...] = ()
    compile_error: Optional[str] = None
    stopped: bool = False


def _run_child(workdir: str, first_test: int, spec: ProgramSpec, limits: SandboxLimits,
               on_test: Callable[[TestRun], bool]) -> _ChildResult:
    """Start one child at ``first_test`` and follow it until it ends, is killed, or ``on_test`` stops it."""
    read_fd, write_fd = os.pipe()
    try:
        with open(os.path.join(workdir, STDERR_FILE), "ab") as stderr_file:
            process = subprocess.Popen(
                _child_command(workdir, write_fd, first_test), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=stderr_file, pass_fds=(write_fd,), cwd=workdir,
                env=_child_environment(workdir), start_new_session=True)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    events = _EventReader(read_fd)
    try:
        return _follow_child(process, events, workdir, first_test, spec, limits, on_test)
    finally:
        _kill_group(process)
        events.close()


def _follow_child(process: subprocess.Popen, events: "_EventReader", workdir: str, first_test: int,
                  spec: ProgramSpec, limits: SandboxLimits,
                  on_test: Callable[[TestRun], bool]) -> _ChildResult:
    """The parent's state machine: starting -> compiling -> one deadline per test."""
    result = _ChildResult(runs=[], next_test=first_test)
    phase = "starting"
    child_will_exit = False
    deadline = time.monotonic() + limits.startup_timeout_s
    while True:
        event = events.next_event(deadline)
        kind = event.get("event")
        if phase == "starting":
            if kind != "hardened":
                raise SandboxError(f"sandbox child failed to start ({_describe_end(kind, process)}): "
                                   f"{_stderr_tail(workdir)}")
            result.isolation = tuple(str(layer) for layer in event.get("layers", ()))
            phase = "compiling"
        elif phase == "compiling":
            if kind != "ready":
                result.compile_error = (str(event.get("error", "")) if kind == "compile_error"
                                        else f"compilation did not finish ({_describe_end(kind, process)})")
                return result
            phase = "testing"
        elif kind == "<eof>" and child_will_exit:
            return result
        else:
            run = _test_run_from_event(event, result.next_test, process, workdir, spec, limits)
            result.runs.append(run)
            result.next_test += 1
            if not on_test(run):
                result.stopped = True
                return result
            if kind != "test" or result.next_test >= spec.num_tests:
                return result
            child_will_exit = bool(event.get("restart"))
        deadline = time.monotonic() + limits.test_timeout_s


def _test_run_from_event(event: dict, index: int, process: subprocess.Popen, workdir: str,
                         spec: ProgramSpec, limits: SandboxLimits) -> TestRun:
    """The run of test ``index`` from its report, or from how the child ended while running it."""
    kind = event.get("event")
    if kind == "<timeout>":
        _kill_group(process)
        return TestRun(index, RunStatus.TIMED_OUT, error=f"exceeded {limits.test_timeout_s:g} s wall clock")
    if kind == "<eof>":
        return _run_of_dead_child(index, process, workdir, spec, limits)
    if kind != "test" or event.get("index") != index or event.get("status") not in ("returned", "raised"):
        _kill_group(process)
        return TestRun(index, RunStatus.CRASHED, error="the program broke the sandbox's report channel")
    output = _take_output(workdir, index, limits)
    return TestRun(index, RunStatus(event["status"]), output, str(event.get("error", "")),
                   bool(event.get("in_tests")))


def _run_of_dead_child(index: int, process: subprocess.Popen, workdir: str, spec: ProgramSpec,
                       limits: SandboxLimits) -> TestRun:
    """The child ended during test ``index`` (``os._exit``, a signal, the CPU limit): judge it by its end."""
    try:
        returncode = process.wait(timeout=_EXIT_GRACE_S)
    except subprocess.TimeoutExpired:  # closed its report pipe but kept running
        _kill_group(process)
        return TestRun(index, RunStatus.CRASHED, error="the program closed the sandbox's report channel")
    output = _take_output(workdir, index, limits)
    if returncode == -signal.SIGXCPU:
        return TestRun(index, RunStatus.TIMED_OUT, output, "CPU time limit exceeded")
    if returncode < 0:
        return TestRun(index, RunStatus.CRASHED, output,
                       f"killed by {signal.Signals(-returncode).name}: {_stderr_tail(workdir)}")
    if spec.mode is not ProgramMode.STDIO:
        return TestRun(index, RunStatus.CRASHED, output, f"the process exited with status {returncode}")
    if returncode == 0:
        return TestRun(index, RunStatus.RETURNED, output)
    return TestRun(index, RunStatus.RAISED, output, f"exit status {returncode}")


def _describe_end(kind: object, process: subprocess.Popen) -> str:
    if kind == "<timeout>":
        _kill_group(process)
        return "timed out"
    if kind == "<eof>":
        _kill_group(process)
        return f"exit status {process.returncode}"
    return f"unexpected report {kind!r}"


def _take_output(workdir: str, index: int, limits: SandboxLimits) -> bytes:
    """Read (at most ``max_output_bytes`` of) and delete test ``index``'s output file."""
    path = output_path(workdir, index)
    try:
        with open(path, "rb") as output_file:
            output = output_file.read(limits.max_output_bytes)
    except FileNotFoundError:
        return b""
    os.remove(path)
    return output


def _stderr_tail(workdir: str) -> str:
    try:
        with open(os.path.join(workdir, STDERR_FILE), "rb") as stderr_file:
            stderr_file.seek(max(0, os.fstat(stderr_file.fileno()).st_size - _STDERR_TAIL_BYTES))
            return stderr_file.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (anything it forked stays in it) and reap the child."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


class _EventReader:
    """JSON-line reports from the child's pipe, with deadlines. Yields ``{"event": "<timeout>"}``,
    ``{"event": "<eof>"}`` or ``{"event": "<garbage>"}`` for the three ways a report can fail to arrive."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = bytearray()
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def next_event(self, deadline: float) -> dict:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[:newline + 1]
                return _parse_event(line)
            if len(self._buffer) > _MAX_EVENT_BYTES:
                return {"event": "<garbage>"}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {"event": "<timeout>"}
            if not self._poller.poll(math.ceil(remaining * 1000)):
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return {"event": "<eof>"}
            self._buffer += chunk

    def close(self) -> None:
        os.close(self._fd)


def _parse_event(line: bytes) -> dict:
    try:
        event = json.loads(line)
    except ValueError:
        return {"event": "<garbage>"}
    return event if isinstance(event, dict) else {"event": "<garbage>"}
