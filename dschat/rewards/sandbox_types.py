"""Trainer side of the sandbox: the data that crosses into it and comes back (what a program is run on, its
limits, how each test's run ended). Trusts: nothing that comes from a program - these are the parent's own
values, built from the task; a program's reports become a :class:`TestRun` only in :mod:`.sandbox_protocol`,
after every check. Threat model and the module map: ``docs/sandbox-threat-model.md``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Optional, Tuple

EXIT_GRACE_S = 1.0  # how long an ended or SIGKILLed process (a child, a cgroup's residents) is waited for


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
    """Resource limits of one sandboxed program; ``docs/sandbox-threat-model.md`` says what each one enforces.

    test_timeout_s: seconds per test (APPS' harness uses 4, HumanEval's 3) on the test clock: the program's CPU
        time across its threads, and wall-clock time less its waits for a CPU, each below it; at most 4 times it
        of wall-clock time (``sandbox_protocol._TestClock``). Compiling the program gets the same budget.
    startup_timeout_s: seconds for the interpreter to start and harden itself (not the program's time: on
        expiry the program's run is a sandbox error).
    memory_bytes: address-space limit (``RLIMIT_AS``) of the child.
    max_output_bytes: cap on each test's stdout, on a call's serialised return value and on stderr
        (``RLIMIT_FSIZE`` on the two memory files the program can write: its whole disk/memory-file quota is
        twice this).
    max_tasks: threads and processes of the program's child, itself included (:class:`.task_bounds._TaskBound`:
        a pids cgroup per program, else ``RLIMIT_NPROC`` under a real uid of the program's own, else
        ``RLIMIT_NPROC`` above the uid's current count); a thread or process beyond it fails to start (EAGAIN) in
        that program.
    cpu_quota: CPUs each program's threads may use together (``cpu.cfs_quota_us`` or ``cpu.max`` of its cgroup,
        where a cgroup can be created; elsewhere ``max_tasks`` bounds its runnable threads).
    syscall_filters: install Landlock and seccomp; False leaves rlimits and the Python-level guard only.
    restrict_reads: with Landlock, let the program read only its directory, the standard library, the
        ``importable_packages`` and what the runtime loads (shared libraries, time zones...), not every file the
        trainer can read (see :func:`child_runtime_paths`).
    importable_packages: the installed packages (besides the standard library) a program may import and read:
        numpy, which APPS' import header imports.
    tmp_root: where private directories are created (default: the system temporary directory).
    """

    test_timeout_s: float = 4.0
    startup_timeout_s: float = 30.0
    memory_bytes: int = 2 << 30
    max_output_bytes: int = 8 << 20
    max_open_files: int = 256
    max_tasks: int = 32
    cpu_quota: float = 1.0
    syscall_filters: bool = True
    restrict_reads: bool = True
    importable_packages: Tuple[str, ...] = ("numpy",)
    tmp_root: Optional[str] = None


@dataclass(frozen=True)
class ProgramSpec:
    """A program and the inputs of its tests.

    STDIO: ``stdin_inputs[i]`` is test i's standard input. CALL: ``call_args[i]`` are test i's positional
    arguments to ``fn_name`` (a top-level function, or a method of a top-level ``Solution`` class).
    HUMANEVAL: one test, ``test_prelude`` (trusted: the problem's prompt) then ``test_code`` then
    ``check(candidate)`` run in the verdict interpreter, the candidate calling ``entry_point`` in the program's
    process. ``prelude``: trusted code run in the program's namespace just before it (APPS' import header).
    ``read_limits[i]``: at most this many bytes of test i's output are read back (by default, and beyond the
    tuple: ``max_output_bytes``); ``TestRun.output_size`` tells how long the whole output was.
    """

    mode: ProgramMode
    source: str
    prelude: str = ""
    stdin_inputs: Tuple[str, ...] = ()
    call_args: Tuple[list, ...] = ()
    fn_name: Optional[str] = None
    test_code: Optional[str] = None
    entry_point: Optional[str] = None
    test_prelude: str = ""
    read_limits: Tuple[int, ...] = ()

    def test_input(self, index: int) -> bytes:
        """What test ``index`` reads: its standard input, or its arguments as JSON (nothing for HumanEval)."""
        if self.mode is ProgramMode.STDIO:
            return self.stdin_inputs[index].encode("utf-8")
        if self.mode is ProgramMode.CALL:
            return json.dumps(self.call_args[index]).encode("utf-8")
        return b""

    def read_limit(self, index: int, limits: "SandboxLimits") -> int:
        """How many bytes of test ``index``'s output the parent reads back."""
        if index < len(self.read_limits):
            return min(self.read_limits[index], limits.max_output_bytes)
        return limits.max_output_bytes

    @property
    def num_tests(self) -> int:
        if self.mode is ProgramMode.STDIO:
            return len(self.stdin_inputs)
        if self.mode is ProgramMode.CALL:
            return len(self.call_args)
        return 1


@dataclass(frozen=True)
class TestRun:
    """One test's run. ``output``: stdout (STDIO) or the return value as plain data (CALL), at most the test's
    read limit (``ProgramSpec.read_limits``) - and in ``ProgramRun.tests``, once ``on_test`` has seen it, its
    first ``_KEPT_OUTPUT_BYTES``; ``output_size``: the length of the whole output (0 when none was read).
    ``raised_in_tests``: the exception came out of the test code's own frames (a HumanEval assertion about a
    returned value) rather than out of the program."""

    __test__ = False  # not a pytest test class

    index: int
    status: RunStatus
    output: bytes = b""
    error: str = ""
    raised_in_tests: bool = False
    output_size: int = 0


@dataclass(frozen=True)
class ProgramRun:
    """Everything one program did: a compile error (no tests run) or the runs of the tests that ran (all of
    them unless the ``on_test`` callback stopped early), and the isolation layers the children applied.
    ``sandbox_error``: the sandbox could not vouch for the run (a child did not start, or applied other
    isolation layers than those asked for); the tests' runs are then not to be scored."""

    compile_error: Optional[str]
    tests: Tuple[TestRun, ...]
    isolation: Tuple[str, ...]
    sandbox_error: Optional[str] = None


class SandboxError(RuntimeError):
    """The sandbox itself failed (a child did not start or harden itself as asked): not a verdict."""

