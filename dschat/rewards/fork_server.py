"""The fork server behind the sandbox's children (execution reward, paper Appendix B.5). It trusts the parent that
started it (the requests on its control socket) and the child code it loaded; it never reads a spec or any byte a
program wrote, and is unreachable from the children (see ``docs/sandbox-threat-model.md``). A long-lived
interpreter that has already loaded one child's code - the program child (``program_child.py``) or the HumanEval
verdict interpreter (``verdict_child.py``) - and forks one process per child, so that a child costs a ``fork``
instead of an interpreter start and its imports.

Started by the parent (:class:`~dschat.rewards.fork_clients._ForkServer`) as ``python -I -S [flags] fork_server.py
CHILD_CODE CONTROL_FD``, in its own session, with the children's base environment, and never runs anything but
this loop: it loads ``CHILD_CODE`` (not registered in ``sys.modules``, as the script it replaces was ``__main__``),
makes itself non-dumpable (no ptrace or ``/proc/PID/mem``-class access by same-uid processes, even without the
filters), freezes its objects for the garbage collector (``gc.freeze``: a child's collections neither visit nor
copy them) and answers the parent's requests on the control socket (``SOCK_SEQPACKET``, one JSON message each):

* spawn ``{"cwd", "env", "targets"}`` with descriptors (``SCM_RIGHTS``), the child's spec file first: fork; the
  child becomes what ``subprocess.Popen(pass_fds=targets, start_new_session=True, cwd=cwd, env=env)`` of the
  child's script made of it (:func:`_become_child`) and runs ``main(spec_fd)``; the reply is ``{"pid"}`` with a
  pidfd of the child;
* reap ``{"reap": pid}`` (the parent asks once the pidfd says the child ended and it has killed its process
  group): ``{"status"}``, the exit status as ``Popen.returncode`` gives it. Until then the child stays a zombie,
  so its pid and process-group id cannot be reused while the parent may still signal them.

What the server holds is never a program's: it reads no spec (the spec file is passed on unread), only
descriptors, a directory name and an environment from the parent. A child gets a private copy of the server's
memory, its own session, exactly the descriptors listed (the control socket and everything else closed), the
environment and working directory asked for, and dies with the server (``PR_SET_PDEATHSIG``), which the parent
then detects and replaces.
"""
from __future__ import annotations

import ctypes
import fcntl
import gc
import importlib.util
import json
import os
import signal
import socket
import sys

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
MAX_MESSAGE_BYTES = 1 << 16  # of one control message, either way
_MAX_DESCRIPTORS = 16


def _load_child_code(path: str):
    """The child's module, executed once here (its imports with it)."""
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prctl(libc, option: int, value: int) -> None:
    if libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _install_descriptors(received: list, targets: list) -> None:
    """The descriptor table a ``Popen`` child had: /dev/null on 0 and 1 (and 2 unless a target is 2), each
    received descriptor at its target number (inheritable, as ``pass_fds`` leaves them), nothing else open."""
    null = os.open(os.devnull, os.O_RDWR)
    floor = max([2, null, *received, *targets]) + 1  # copies above every number in play: no dup2 clobbers one
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in (null, *received)]
    wanted = {0: moved[0], 1: moved[0], 2: moved[0], **dict(zip(targets, moved[1:]))}
    for target, source in wanted.items():
        os.dup2(source, target)
    low = 0
    for keep in sorted(wanted):
        if low < keep:  # os.closerange(n, n) would close everything from n on (close_range(n, UINT_MAX))
            os.closerange(low, keep)
        low = keep + 1
    os.closerange(low, 1 << 30)


def _become_child(libc, server_pid: int, request: dict, received: list) -> None:
    """In the forked child, before any of the child's code runs: its own session, death with the server,
    dumpable again (as an exec'd process is), its descriptors, working directory and environment."""
    os.setsid()
    _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before the line above: nobody would reap this child
        os._exit(1)
    _prctl(libc, _PR_SET_DUMPABLE, 1)
    _install_descriptors(received, request["targets"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])


def _run_child(libc, server_pid: int, child_code, request: dict, received: list) -> None:
    """The forked child's whole life: it never returns into the server's loop."""
    try:
        _become_child(libc, server_pid, request, received)
        child_code.main(request["targets"][0])
    except BaseException:
        sys.excepthook(*sys.exc_info())
        sys.stderr.flush()
    finally:
        os._exit(1)


def _spawn(libc, control: socket.socket, child_code, request: dict, received: list) -> int:
    """Fork one child and reply with its pid and a pidfd (or why the fork failed); the child's pid, 0 if none."""
    server_pid = os.getpid()
    try:
        pid = os.fork()
    except OSError as error:
        control.send(json.dumps({"error": str(error)}).encode("utf-8"))
        return 0
    if pid == 0:
        _run_child(libc, server_pid, child_code, request, received)
    pidfd = os.pidfd_open(pid)
    try:
        socket.send_fds(control, [json.dumps({"pid": pid}).encode("utf-8")], [pidfd])
    finally:
        os.close(pidfd)
    return pid


def _reap(control: socket.socket, pid: int, children: set) -> None:
    """Reap one of this server's children (already ended: the parent asks after its pidfd said so)."""
    status = None
    if pid in children:
        children.discard(pid)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    control.send(json.dumps({"status": status}).encode("utf-8"))


def serve(child_code, control: socket.socket) -> None:
    """Answer the parent until it closes the control socket; then kill what is left of the children."""
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl(libc, _PR_SET_DUMPABLE, 0)
    children: set = set()
    gc.freeze()
    while True:
        try:
            message, received, _, _ = socket.recv_fds(control, MAX_MESSAGE_BYTES, _MAX_DESCRIPTORS)
        except OSError:
            break
        if not message:
            break
        request = json.loads(message)
        if "reap" in request:
            _reap(control, request["reap"], children)
            continue
        try:
            pid = _spawn(libc, control, child_code, request, received)
        finally:
            for fd in received:
                os.close(fd)
        if pid:
            children.add(pid)
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    serve(_load_child_code(sys.argv[1]), socket.socket(fileno=int(sys.argv[2])))
