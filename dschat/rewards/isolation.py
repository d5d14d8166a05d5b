"""The program child's isolation, applied to itself before it touches the program (:func:`harden`): resource
limits, its share of the tasks and CPU (the parent's :mod:`.task_bounds`), ``no_new_privs``, every capability
dropped, Landlock (no write anywhere, reads only where :func:`~.sandbox_spec.child_runtime_paths` allows) and the
x86-64 seccomp allow-list; without the filters, only a Python-level guard. Trusts the kernel (and asks it which
Landlock ABI it offers); trusts nothing the program does afterwards: every layer is irreversible once applied,
and the layers applied are reported for the parent to check. See ``docs/sandbox-threat-model.md``.
"""
from __future__ import annotations

import ctypes
import errno
import os
import resource


_PR_SET_SECCOMP = 22
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2
_CAPABILITY_VERSION_3 = 0x20080522
_LANDLOCK_CREATE_RULESET = 444  # the Landlock system calls have the same numbers on every architecture
_LANDLOCK_ADD_RULE = 445
_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_EXECUTE, _LANDLOCK_READ_FILE, _LANDLOCK_READ_DIR = 1, 4, 8
_LANDLOCK_FILE_RIGHTS = 1 | 2 | 4 | (1 << 14) | (1 << 15)  # rights a rule on a file (not a directory) may hold


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers (0: none). Also called by the parent, to know what to ask."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(ctypes.c_long(_LANDLOCK_CREATE_RULESET), None, ctypes.c_long(0),
                               ctypes.c_long(_LANDLOCK_CREATE_RULESET_VERSION)))


def harden(workdir: str, readable_paths: list, limits: dict, cpu_seconds: int, task_bound: dict) -> list[str]:
    """Apply every isolation layer asked for, most fundamental first; returns the names of those applied
    (the parent compares them with what it asked for)."""
    layers = ["rlimits"]
    _set_resource_limits(limits, cpu_seconds)
    libc = ctypes.CDLL(None, use_errno=True)
    layers += _bound_tasks(libc, task_bound, limits["syscall_filters"])
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) == 0:
        layers.append("no_new_privs")
    if _drop_capabilities(libc):
        layers.append("no_capabilities")
    if limits["syscall_filters"]:
        abi = _restrict_filesystem(libc, workdir, readable_paths if limits["restrict_reads"] else None)
        if abi:
            layers.append(f"landlock_abi{abi}")
            if limits["restrict_reads"]:
                layers.append("landlock_reads")
        if _install_seccomp(libc, os.getpid(), threads=not task_bound["no_threads"]):
            layers.append("seccomp")
    else:
        _python_level_guard()
        layers.append("python_guard")
    return layers


def _set_resource_limits(limits: dict, cpu_seconds: int) -> None:
    for limit, value in ((resource.RLIMIT_AS, limits["memory_bytes"]),
                         (resource.RLIMIT_FSIZE, limits["max_output_bytes"]),
                         (resource.RLIMIT_NOFILE, limits["max_open_files"]),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))


def _bound_tasks(libc, bound: dict, syscall_filters: bool) -> list[str]:
    """This child's share of the machine's tasks and CPU, as the parent's ``_TaskBound`` prepared it, applied while
    the child still holds its capabilities (the program cannot undo it: it can write no cgroup file, and the
    filters refuse every ``set*uid`` call); the layers applied. Cgroups: the child was born in its slot's (its
    fork server lives there) and checks that it is in each one it is given (``tasks_cgroup``: ``pids.max``;
    ``cpu_cgroup``: a CPU quota). ``uid``: its real uid becomes its slot's own
    (effective and filesystem uids unchanged) under ``RLIMIT_NPROC`` (``tasks_uid``). ``nproc``: ``RLIMIT_NPROC``
    above the tasks its uid runs now (``tasks_nproc``). ``no_threads``: the seccomp filter (installed later, x86-64
    only) refuses every thread (``tasks_seccomp``)."""
    layers = []
    if bound["cgroups"]:
        with open("/proc/self/cgroup", encoding="utf-8") as cgroups:
            mine = {(controller, path) for _, controllers, path in
                    (line.rstrip("\n").split(":", 2) for line in cgroups) for controller in controllers.split(",")}
        layers += [layer for layer, (controller, path) in bound["cgroups"].items() if (controller, path) in mine]
    if bound["uid"] is not None:
        _drop_bounding_set(libc)  # needs CAP_SETPCAP, which the uid change below may take away
        resource.setrlimit(resource.RLIMIT_NPROC, (bound["max_tasks"], bound["max_tasks"]))
        os.setresuid(bound["uid"], -1, -1)
        if os.getresuid()[0] == bound["uid"]:
            layers.append("tasks_uid")
    if bound["nproc"]:
        limit = _tasks_of_uid(os.getuid()) + bound["max_tasks"]
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        layers.append("tasks_nproc")
    if bound["no_threads"] and syscall_filters and os.uname().machine == "x86_64":
        layers.append("tasks_seccomp")  # a filter that is then not installed is a missing "seccomp" layer
    return layers


def _tasks_of_uid(uid: int) -> int:
    """How many tasks (threads) processes of real uid ``uid`` run now, as ``RLIMIT_NPROC`` counts them."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status.read().splitlines() if b":" in line)
            if int(fields[b"Uid"].split()[0]) == uid:
                count += int(fields[b"Threads"])
        except (OSError, KeyError, ValueError, IndexError):  # a process that ended meanwhile
            continue
    return count


class _CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapabilityData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(libc) -> bool:
    """Empty the bounding set (where permitted) and the effective, permitted and inheritable sets."""
    _drop_bounding_set(libc)
    header = _CapabilityHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapabilityData * 2)()
    return libc.capset(ctypes.byref(header), data) == 0


def _drop_bounding_set(libc) -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last_cap_file:
            last_capability = int(last_cap_file.read())
    except OSError:
        last_capability = 63
    for capability in range(last_capability + 1):
        libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(capability), ctypes.c_ulong(0), ctypes.c_ulong(0),
                   ctypes.c_ulong(0))


class _LandlockRulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _LandlockPathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _restrict_filesystem(libc, workdir: str, readable_paths) -> int:
    """Landlock: every filesystem right the kernel knows is handled, and only reading is granted - beneath
    ``workdir`` and ``readable_paths`` (the Python installation and what the runtime loads), or beneath ``/``
    when ``readable_paths`` is None: nothing can be written, created, renamed, linked, truncated or removed
    through a path, and no device ioctl (ABI >= 5) is allowed. No TCP bind/connect (ABI >= 4); signals and
    abstract UNIX sockets scoped to the sandbox (ABI >= 6). Returns the ABI version applied, 0 if none."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    filesystem_rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    for first_abi, right in ((2, 1 << 13), (3, 1 << 14), (5, 1 << 15)):  # REFER, TRUNCATE, IOCTL_DEV
        if abi >= first_abi:
            filesystem_rights |= right
    attr = _LandlockRulesetAttr(filesystem_rights, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    attr_size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset_fd = libc.syscall(ctypes.c_long(_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                              ctypes.c_long(attr_size), ctypes.c_long(0))
    if ruleset_fd < 0:
        return 0
    read_rights = {"tree": _LANDLOCK_EXECUTE | _LANDLOCK_READ_FILE | _LANDLOCK_READ_DIR,
                   "names": _LANDLOCK_READ_DIR}
    rules = [(workdir, _LANDLOCK_READ_FILE | _LANDLOCK_READ_DIR)]
    rules += [(path, read_rights[kind]) for path, kind in ([("/", "tree")] if readable_paths is None
                                                           else readable_paths)]
    try:
        for path, rights in rules:
            try:
                path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:  # a runtime path this machine does not have
                continue
            if not os.path.isdir(path):
                rights &= _LANDLOCK_FILE_RIGHTS
                if not rights:
                    os.close(path_fd)
                    continue
            rule = _LandlockPathBeneathAttr(rights, path_fd)
            added = libc.syscall(ctypes.c_long(_LANDLOCK_ADD_RULE), ctypes.c_long(ruleset_fd),
                                 ctypes.c_long(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule),
                                 ctypes.c_long(0))
            os.close(path_fd)
            if added != 0:
                return 0
        restricted = libc.syscall(ctypes.c_long(_LANDLOCK_RESTRICT_SELF), ctypes.c_long(ruleset_fd),
                                  ctypes.c_long(0))
        return abi if restricted == 0 else 0
    finally:
        os.close(ruleset_fd)


# Seccomp-BPF for x86-64. seccomp_data: nr at offset 0, arch at 4, args[i] at 16 + 8 i (low word first).
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_CLONE_THREAD = 0x00010000
_BPF_LOAD_WORD, _BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_RETURN = 0x20, 0x15, 0x35, 0x45, 0x06
_SECCOMP_ALLOW, _SECCOMP_KILL_PROCESS = 0x7FFF0000, 0x80000000
# The allow-list: what a CPython program that computes needs (the interpreter, its threads, numpy), found by
# tracing the child, the APPS prelude's imports, numpy and a thread; everything else fails with EPERM.
_X86_64_ALLOWED = {
    # descriptors the process holds (reads, writes to its memory files and pipes), reading the file tree
    "read": 0, "write": 1, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "poll": 7, "lseek": 8, "pread64": 17,
    "pwrite64": 18, "readv": 19, "writev": 20, "access": 21, "pipe": 22, "select": 23, "dup": 32, "dup2": 33,
    "ftruncate": 77, "getdents": 78, "getcwd": 79, "chdir": 80, "fchdir": 81, "readlink": 89, "statfs": 137,
    "fstatfs": 138, "getdents64": 217, "epoll_wait": 232, "epoll_ctl": 233, "newfstatat": 262,
    "readlinkat": 267, "faccessat": 269, "pselect6": 270, "ppoll": 271, "epoll_pwait": 281,
    "epoll_create1": 291, "dup3": 292, "pipe2": 293, "statx": 332, "close_range": 436, "faccessat2": 439,
    # memory
    "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "mremap": 25, "madvise": 28, "mbind": 237,
    "get_mempolicy": 239,
    # signals and timers of this process
    "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "pause": 34, "getitimer": 36, "alarm": 37,
    "setitimer": 38, "rt_sigpending": 127, "rt_sigtimedwait": 128, "rt_sigsuspend": 130, "sigaltstack": 131,
    "restart_syscall": 219,
    # threads, time, identity, limits (read)
    "sched_yield": 24, "nanosleep": 35, "getpid": 39, "exit": 60, "uname": 63, "gettimeofday": 96,
    "getrlimit": 97, "getrusage": 98, "sysinfo": 99, "times": 100, "getuid": 102, "getgid": 104,
    "geteuid": 107, "getegid": 108, "getppid": 110, "getpgrp": 111, "getgroups": 115, "getresuid": 118,
    "getresgid": 120, "getpgid": 121, "getsid": 124, "setrlimit": 160, "gettid": 186, "time": 201, "futex": 202,
    "sched_getaffinity": 204, "set_tid_address": 218, "clock_gettime": 228, "clock_getres": 229,
    "clock_nanosleep": 230, "exit_group": 231, "set_robust_list": 273, "get_robust_list": 274, "getcpu": 309,
    "getrandom": 318, "rseq": 334,
}
_X86_64_SIGNALS = {"rt_sigqueueinfo": 129, "kill": 62, "tkill": 200, "tgkill": 234, "rt_tgsigqueueinfo": 297}
_X86_64_CLONE, _X86_64_CLONE3, _X86_64_PRLIMIT64, _X86_64_OPENAT2 = 56, 435, 302, 437
_X86_64_OPEN_FLAGS_ARGUMENT = {2: 1, 257: 2}  # open(path, flags, ...), openat(dirfd, path, flags, ...)
_X86_64_IOCTL, _X86_64_FCNTL = 16, 72
# O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | __O_TMPFILE: any open that could write
_OPEN_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000 | 0o20000000
_O_ASYNC = 0o20000
_ALLOWED_IOCTLS = (0x5401, 0x5413)  # TCGETS (isatty), TIOCGWINSZ: anything else (FIOASYNC, FIOSETOWN...) ENOTTY
# F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_DUPFD_CLOEXEC, F_GETPIPE_SZ, F_GET_SEALS; F_SETFL is checked apart (no
# O_ASYNC); refused: F_SETOWN(_EX), F_SETSIG (signals sent to another process), leases, F_NOTIFY, locks...
_ALLOWED_FCNTLS = (0, 1, 2, 3, 1030, 1032, 1034)
_F_SETFL = 4


def _bpf(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> tuple[int, int, int, int]:
    return code, jump_true, jump_false, k


def _bpf_errno(number: int) -> int:
    return 0x00050000 | number


def _argument_rule(syscall: int, argument: int, test: int, value: int,
                   refusal: int = errno.EPERM) -> list[tuple[int, int, int, int]]:
    """Allow ``syscall`` only when its argument's low word passes ``test`` against ``value``; else ``refusal``."""
    return [_bpf(_BPF_JEQ, syscall, 0, 4), _bpf(_BPF_LOAD_WORD, 16 + 8 * argument),
            _bpf(test, value, 0, 1), _bpf(_BPF_RETURN, _SECCOMP_ALLOW),
            _bpf(_BPF_RETURN, _bpf_errno(refusal))]


def _refusal_rule(syscall: int, argument: int, test: int, values, refusal: int) -> list[tuple[int, int, int, int]]:
    """Refuse ``syscall`` with ``refusal`` when its argument's low word passes ``test`` against any of
    ``values``; else allow it."""
    program = [_bpf(_BPF_JEQ, syscall, 0, len(values) + 3), _bpf(_BPF_LOAD_WORD, 16 + 8 * argument)]
    for position, value in enumerate(values):
        program.append(_bpf(test, value, len(values) - position, 0))
    return program + [_bpf(_BPF_RETURN, _SECCOMP_ALLOW), _bpf(_BPF_RETURN, _bpf_errno(refusal))]


def _allow_rule(syscall: int, argument: int, values, refusal: int) -> list[tuple[int, int, int, int]]:
    """Allow ``syscall`` when its argument's low word equals one of ``values``; else ``refusal``."""
    program = [_bpf(_BPF_JEQ, syscall, 0, len(values) + 3), _bpf(_BPF_LOAD_WORD, 16 + 8 * argument)]
    for position, value in enumerate(values):
        program.append(_bpf(_BPF_JEQ, value, len(values) - position, 0))
    return program + [_bpf(_BPF_RETURN, _bpf_errno(refusal)), _bpf(_BPF_RETURN, _SECCOMP_ALLOW)]


def _fcntl_rule() -> list[tuple[int, int, int, int]]:
    """fcntl: the commands in ``_ALLOWED_FCNTLS``, and F_SETFL without O_ASYNC; anything else EPERM."""
    allowed = _ALLOWED_FCNTLS
    program = [_bpf(_BPF_JEQ, _X86_64_FCNTL, 0, len(allowed) + 6), _bpf(_BPF_LOAD_WORD, 16 + 8)]
    for position, value in enumerate(allowed):
        program.append(_bpf(_BPF_JEQ, value, len(allowed) - position + 3, 0))
    return program + [
        _bpf(_BPF_JEQ, _F_SETFL, 0, 2), _bpf(_BPF_LOAD_WORD, 16 + 8 * 2), _bpf(_BPF_JSET, _O_ASYNC, 0, 1),
        _bpf(_BPF_RETURN, _bpf_errno(errno.EPERM)), _bpf(_BPF_RETURN, _SECCOMP_ALLOW),
    ]


def _seccomp_program(own_pid: int, threads: bool = True) -> list[tuple[int, int, int, int]]:
    """The filter, an allow-list: foreign architectures killed; the calls in ``_X86_64_ALLOWED`` allowed;
    open/openat only for reading (else EACCES; openat2, whose flags a filter cannot read, ENOSYS so that
    callers fall back to openat); ioctl only ``_ALLOWED_IOCTLS`` (else ENOTTY); fcntl only ``_ALLOWED_FCNTLS``
    and F_SETFL without O_ASYNC; clone only for threads (clone3 ENOSYS, so that glibc falls back to clone);
    signals only to this process; prlimit64 only to read another process's limits; every other call (processes, sockets, SysV
    and POSIX IPC, inotify/fanotify, ptrace, scheduling and priority changes, file tree and metadata changes,
    memfd_create, io_uring, bpf, mount, the calls nobody thought of) fails with EPERM."""
    program = [
        _bpf(_BPF_LOAD_WORD, 4), _bpf(_BPF_JEQ, _AUDIT_ARCH_X86_64, 1, 0),
        _bpf(_BPF_RETURN, _SECCOMP_KILL_PROCESS),
        _bpf(_BPF_LOAD_WORD, 0), _bpf(_BPF_JGE, _X32_SYSCALL_BIT, 0, 1),
        _bpf(_BPF_RETURN, _bpf_errno(errno.ENOSYS)),
    ]
    for syscall in _X86_64_ALLOWED.values():
        program += [_bpf(_BPF_JEQ, syscall, 0, 1), _bpf(_BPF_RETURN, _SECCOMP_ALLOW)]
    for syscall in (_X86_64_CLONE3, _X86_64_OPENAT2):
        program += [_bpf(_BPF_JEQ, syscall, 0, 1), _bpf(_BPF_RETURN, _bpf_errno(errno.ENOSYS))]
    for syscall, argument in _X86_64_OPEN_FLAGS_ARGUMENT.items():
        program += _refusal_rule(syscall, argument, _BPF_JSET, (_OPEN_WRITE_FLAGS,), errno.EACCES)
    program += _allow_rule(_X86_64_IOCTL, 1, _ALLOWED_IOCTLS, errno.ENOTTY)
    program += _fcntl_rule()
    if threads:
        program += _argument_rule(_X86_64_CLONE, 0, _BPF_JSET, _CLONE_THREAD)
    else:  # the last task bound: no thread at all (EAGAIN, as when a bound is reached)
        program += [_bpf(_BPF_JEQ, _X86_64_CLONE, 0, 1), _bpf(_BPF_RETURN, _bpf_errno(errno.EAGAIN))]
    for syscall in _X86_64_SIGNALS.values():
        program += _argument_rule(syscall, 0, _BPF_JEQ, own_pid)
    program += [  # prlimit64(pid, resource, new_limit, old_limit): pid 0 or this process may set its own limits
        # (the kernel keeps soft <= hard, and without capabilities a hard limit only goes down); another
        # process's limits may only be read (new_limit NULL)
        _bpf(_BPF_JEQ, _X86_64_PRLIMIT64, 0, 9), _bpf(_BPF_LOAD_WORD, 16), _bpf(_BPF_JEQ, 0, 5, 0),
        _bpf(_BPF_JEQ, own_pid, 4, 0), _bpf(_BPF_LOAD_WORD, 16 + 8 * 2), _bpf(_BPF_JEQ, 0, 0, 3),
        _bpf(_BPF_LOAD_WORD, 16 + 8 * 2 + 4), _bpf(_BPF_JEQ, 0, 0, 1), _bpf(_BPF_RETURN, _SECCOMP_ALLOW),
        _bpf(_BPF_RETURN, _bpf_errno(errno.EPERM)),
    ]
    program.append(_bpf(_BPF_RETURN, _bpf_errno(errno.EPERM)))
    return program


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _install_seccomp(libc, own_pid: int, threads: bool = True) -> bool:
    """Install :func:`_seccomp_program` (x86-64 only; needs ``no_new_privs``). True when installed."""
    if os.uname().machine != "x86_64":
        return False
    program = _seccomp_program(own_pid, threads)
    instructions = (_SockFilter * len(program))(*(_SockFilter(*instruction) for instruction in program))
    fprog = _SockFprog(len(program), instructions)
    return libc.prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0


def _python_level_guard() -> None:
    """Fallback without seccomp: replace the Python entry points to processes, signals and sockets."""
    import socket  # imported here: only the fallback needs these, and they cost every start-up time
    import subprocess

    def blocked(*args, **kwargs):
        raise PermissionError(errno.EPERM, "blocked by the sandbox")

    for name in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "kill", "killpg",
                 "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
                 "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe"):
        if hasattr(os, name):
            setattr(os, name, blocked)
    subprocess.Popen = blocked
    socket.socket = blocked
    socket.create_connection = blocked
    socket.socketpair = blocked
