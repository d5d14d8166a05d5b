"""Trainer side of the sandbox: the bound on each program's tasks (threads and processes) and CPU - a pids (and
cpu) cgroup per program, a real uid of its own under ``RLIMIT_NPROC``, ``RLIMIT_NPROC`` above its uid's count, or
seccomp's no-thread filter - chosen once per trainer process. Trusts: the kernel's cgroup and uid accounting, and
the fork servers it places in a slot's cgroups (started by the parent, idle). Does not trust: anything left in a
slot's cgroup after its program - it is killed before the slot is reused, and a slot that does not empty is not
reused. The child's side of the same bound is :func:`.isolation._bound_tasks`. Threat model:
``docs/sandbox-threat-model.md``.
"""
from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

from .sandbox_types import EXIT_GRACE_S, SandboxError, SandboxLimits

logger = logging.getLogger(__name__)

TASK_BOUNDS = ("cgroup_v1", "cgroup_v2", "uid", "nproc", "seccomp")  # in the order they are tried
_SANDBOX_UID_BASE = 61184  # the real uid of slot 0 under the ``uid`` bound (systemd's range for dynamic users)
_MAX_SLOTS = 4096  # programs running at once in one trainer process
_CPU_PERIOD_US = 100_000
_CGROUP_PREFIX = "dschat-sandbox-"
_BOUND_LAYERS = ("tasks_cgroup", "cpu_cgroup")  # the cgroups that bound a program (the child checks it is in them)


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
            return tuple(layer for layer in _BOUND_LAYERS if layer in self._cgroups)
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
            elif layer == "cpu_cgroup" and self._version == 2:
                _write_control(directory, "cpu.max", f"{round(limits.cpu_quota * _CPU_PERIOD_US)} {_CPU_PERIOD_US}")
            elif layer == "cpu_cgroup":
                _write_control(directory, "cpu.cfs_period_us", str(_CPU_PERIOD_US))
                _write_control(directory, "cpu.cfs_quota_us", str(round(limits.cpu_quota * _CPU_PERIOD_US)))
            if layer in _BOUND_LAYERS:  # (cpu_usage only counts: the parent's clock reads it, see cpu_usage_file)
                bound["cgroups"][layer] = [controller, os.path.join(path, self._name(slot))]
        return bound

    def cpu_usage_file(self, slot: int) -> Optional[str]:
        """The file in which the kernel counts the CPU time of everything in ``slot``'s cgroups (read with
        :func:`cgroup_cpu_seconds`), or None without a cgroup that counts it: cgroup v2's ``cpu.stat``, cgroup
        v1's ``cpuacct.usage`` where the cpuacct controller is mounted."""
        if self._version == 2 and "tasks_cgroup" in self._cgroups:
            return os.path.join(self._cgroups["tasks_cgroup"][1], self._name(slot), "cpu.stat")
        if "cpu_usage" in self._cgroups:
            return os.path.join(self._cgroups["cpu_usage"][1], self._name(slot), "cpuacct.usage")
        return None

    def place(self, slot: int, pid: int) -> None:
        """Move a fork server of ``slot`` (just started, idle) into the slot's cgroups, as :meth:`acquire` prepared
        them (a missing one is an error, never made again without its limits): its children are born there."""
        for directory in self._directories(slot):
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
        """Remove the slots' cgroups (at exit, once the fork servers are gone: :func:`close_task_bound`)."""
        if self.pid != os.getpid():
            return
        for slot in range(self._slots):
            for directory in self._directories(slot):
                _remove_cgroup(directory, EXIT_GRACE_S)


def _remove_cgroup(directory: str, grace_s: float) -> None:
    """Remove an empty cgroup, waiting up to ``grace_s`` for the kernel to let go of processes just reaped
    (EBUSY); a cgroup that is gone already, or still holds a process, stays as it is."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            os.rmdir(directory)
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                return
        time.sleep(0.01)


def _remove_stale_slots(directory: str) -> List[str]:
    """Remove the slot cgroups below the trainer's cgroup ``directory`` that trainers which are no longer running
    left behind (a trainer killed before its exit handlers ran); the names removed. A live process's slots, and a
    slot that still holds a process, are left alone."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        owner, _, slot = name[len(_CGROUP_PREFIX):].partition("-")
        if not (name.startswith(_CGROUP_PREFIX) and owner.isdigit() and slot.isdigit()) or _running(int(owner)):
            continue
        _remove_cgroup(os.path.join(directory, name), 0.0)
        if not os.path.exists(os.path.join(directory, name)):
            removed.append(name)
    if removed:
        logger.info("sandbox: removed %d slot cgroups of trainers no longer running below %s", len(removed),
                    directory)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        pass
    return True


def cgroup_cpu_seconds(text: bytes) -> float:
    """The CPU seconds in the text of a :meth:`_TaskBound.cpu_usage_file`: cgroup v2's ``usage_usec`` line,
    cgroup v1's nanoseconds."""
    if text.startswith(b"usage_usec "):
        return int(text.split(b"\n", 1)[0].split()[1]) / 1e6
    return int(text) / 1e9


def _write_control(directory: str, name: str, value: str) -> None:
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode("ascii"))
    finally:
        os.close(fd)


def _empty_cgroup(directory: str, residents: set) -> bool:
    """SIGKILL every process in the cgroup ``directory`` but ``residents``; whether none is then left (within a
    short wait)."""
    deadline = time.monotonic() + EXIT_GRACE_S
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
    if mechanism == "cgroup_v1":  # and cpuacct, which counts a slot's CPU time (cgroup v2's cpu.stat always does)
        layers = {layer: (controller, *own[controller]) for layer, controller in (*wanted, ("cpu_usage", "cpuacct"))
                  if controller in own}
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
        for directory in sorted({own for _, own, _ in layers.values()}):
            _remove_stale_slots(directory)
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


def close_task_bound() -> None:
    """Remove this process's slot cgroups; at exit, after the fork servers that live in them are gone
    (:mod:`.fork_clients` registers both, in that order)."""
    if _TASK_BOUND:
        _TASK_BOUND[0].close()


_TASK_BOUND_LOCK = threading.Lock()

