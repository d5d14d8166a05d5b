"""Hostile programs in the sandbox: each one is contained, killed or refused, scored, and the trainer (this
process) carries on. Limits are small so the whole file runs in a few seconds."""
from __future__ import annotations

import os
import time

import pytest

from dschat.rewards import ProgramOutcome, SandboxLimits, TestOutcome, code_reward, execute_program
from dschat.rewards.sandbox import ProgramMode, ProgramSpec, RunStatus, run_program
from dschat.data.schema import CodeTask

ON_X86_64 = os.uname().machine == "x86_64"


def stdio_task(num_tests: int = 1) -> CodeTask:
    return CodeTask(task_id="hostile", prompt="", inputs=[f"{index}\n" for index in range(num_tests)],
                    outputs=[f"{index}\n" for index in range(num_tests)])


def call_task() -> CodeTask:
    return CodeTask(task_id="hostile-call", prompt="", fn_name="f", inputs=[[1]], outputs=[1])


@pytest.fixture
def limits(tmp_path) -> SandboxLimits:
    """Private directories under this test's tmp_path, so leftover processes can be found by their argv."""
    return SandboxLimits(test_timeout_s=1.0, memory_bytes=256 << 20, max_output_bytes=1 << 20,
                         tmp_root=str(tmp_path))


def processes_mentioning(text: str) -> list:
    """Pids of live (non-zombie) processes whose command line contains ``text``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline, open(f"/proc/{entry}/stat", "rb") as stat:
                mentions = text.encode() in cmdline.read()
                zombie = stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if mentions and not zombie:
            pids.append(int(entry))
    return pids


def assert_no_leftover_processes(tmp_path) -> None:
    deadline = time.monotonic() + 2.0
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_mentioning(str(tmp_path)) == []


def test_isolation_layers_are_applied(limits):
    result = execute_program(stdio_task(), "print(input())", limits)
    assert result.outcome is ProgramOutcome.PASSED
    assert {"rlimits", "no_new_privs", "no_capabilities"} <= set(result.isolation)
    if ON_X86_64:
        assert "seccomp" in result.isolation


def test_infinite_loop_times_out_and_its_group_is_killed(limits, tmp_path):
    started = time.monotonic()
    result = execute_program(stdio_task(), "while True:\n    pass\n", limits)
    assert result.outcome is ProgramOutcome.TIMEOUT and code_reward(result) == -0.6
    assert time.monotonic() - started < 5
    assert_no_leftover_processes(tmp_path)


def test_loop_that_swallows_exceptions_still_times_out(limits):
    program = "while True:\n    try:\n        sum(range(10**9))\n    except BaseException:\n        pass\n"
    assert execute_program(stdio_task(), program, limits).outcome is ProgramOutcome.TIMEOUT


@pytest.mark.skipif(not ON_X86_64, reason="the seccomp filter is installed on x86-64 only")
def test_fork_bomb_is_refused_by_seccomp(limits, tmp_path):
    result = execute_program(stdio_task(), "import os\nwhile True:\n    os.fork()\n", limits)
    assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "Operation not permitted" in result.detail
    assert code_reward(result) == -0.6
    assert_no_leftover_processes(tmp_path)


def test_forked_processes_die_with_the_group_without_syscall_filters(tmp_path):
    """Fallback path: libc fork through ctypes gets past the Python-level guard; 4 children that sleep (bounded
    even if nothing worked), parent loops; the timeout's killpg must take all of them."""
    program = ("import ctypes, os, time\nlibc = ctypes.CDLL(None)\nfor _ in range(4):\n"
               "    if libc.fork() == 0:\n        time.sleep(30)\n        os._exit(0)\nwhile True:\n    pass\n")
    limits = SandboxLimits(test_timeout_s=1.0, syscall_filters=False, tmp_root=str(tmp_path))
    result = execute_program(stdio_task(), program, limits)
    assert "python_guard" in result.isolation and "seccomp" not in result.isolation
    assert result.outcome is ProgramOutcome.TIMEOUT
    assert_no_leftover_processes(tmp_path)


def test_python_level_guard_blocks_fork_and_sockets_without_syscall_filters(tmp_path):
    limits = SandboxLimits(test_timeout_s=1.0, syscall_filters=False, tmp_root=str(tmp_path))
    for program in ("import os\nos.fork()", "import socket\nsocket.socket()", "import subprocess\n"
                    "subprocess.run(['true'])"):
        result = execute_program(stdio_task(), program, limits)
        assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "blocked by the sandbox" in result.detail


def test_unbounded_allocation_hits_the_memory_limit(limits):
    for program in ("chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))\n", "x = bytearray(10**11)"):
        result = execute_program(stdio_task(), program, limits)
        assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "MemoryError" in result.detail


def test_writes_outside_the_private_directory_are_refused(limits, tmp_path):
    outside = tmp_path / "escaped.txt"
    in_tmp = f"/tmp/dschat-escape-{os.getpid()}.txt"
    for target in (str(outside), in_tmp):
        result = execute_program(stdio_task(), f"open({target!r}, 'w').write('x')\nprint(input())", limits)
        if any(layer.startswith("landlock") for layer in result.isolation):
            assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "Permission denied" in result.detail
            assert not os.path.exists(target)
        elif os.path.exists(target):
            os.remove(target)


def test_cwd_home_and_tmpdir_are_the_private_directory_and_read_only(limits, tmp_path):
    program = ("import os\nprint(os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])\n"
               "print(sorted(os.listdir('.')))\nopen('note.txt', 'w')\n")
    run = run_program(ProgramSpec(ProgramMode.STDIO, program, stdin_inputs=("",)), limits)
    assert run.tests[0].output.decode().splitlines() == ["True", "[]"]  # inputs are not files
    assert run.tests[0].status is RunStatus.RAISED and "PermissionError" in run.tests[0].error
    assert os.listdir(tmp_path) == []  # the private directory is removed afterwards


def test_reading_stdin_forever_ends(limits):
    assert execute_program(stdio_task(), "while True:\n    input()\n", limits).outcome \
        is ProgramOutcome.RUNTIME_ERROR  # EOFError: stdin is a file
    assert execute_program(stdio_task(), "import sys\nwhile True:\n    sys.stdin.read()\n", limits).outcome \
        is ProgramOutcome.TIMEOUT
    assert execute_program(call_task(), "def f(x):\n    return input()\n", limits).outcome \
        is ProgramOutcome.RUNTIME_ERROR  # /dev/null


def test_printing_gigabytes_hits_the_output_limit(limits):
    for program in ("while True:\n    print('x' * 10**6)\n", "import os\nwhile True:\n    os.write(1, b'x' * 10**6)\n"):
        started = time.monotonic()
        result = execute_program(stdio_task(), program, limits)
        assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "output limit exceeded" in result.detail
        assert time.monotonic() - started < 5


def test_printing_forever_in_a_call_is_a_timeout(limits):
    result = execute_program(call_task(), "def f(x):\n    while True:\n        print(x)\n", limits)
    assert result.outcome is ProgramOutcome.TIMEOUT


@pytest.mark.skipif(not ON_X86_64, reason="the seccomp filter is installed on x86-64 only")
@pytest.mark.parametrize("program", [
    "import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)",
    "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9))",
    "import socket\nsocket.socket(socket.AF_UNIX)",
])
def test_sockets_are_refused(limits, program):
    result = execute_program(stdio_task(), program, limits)
    assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "Operation not permitted" in result.detail


@pytest.mark.skipif(not ON_X86_64, reason="the seccomp filter is installed on x86-64 only")
@pytest.mark.parametrize("program", [
    "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "import os\nos.execv('/bin/sh', ['sh', '-c', 'true'])",
    "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))",
    "import subprocess\nsubprocess.run(['true'])",
])
def test_signals_exec_and_raising_limits_are_refused(limits, program):
    result = execute_program(stdio_task(), program, limits)
    assert result.outcome is ProgramOutcome.RUNTIME_ERROR, result.detail


def test_threads_still_work_under_the_filter(limits):
    program = ("import threading\nresults = []\nthreads = [threading.Thread(target=results.append, args=(i,))"
               " for i in range(4)]\n[t.start() for t in threads]\n[t.join() for t in threads]\n"
               "print(sorted(results) == [0, 1, 2, 3])\n")
    run = run_program(ProgramSpec(ProgramMode.STDIO, program, stdin_inputs=("",)), limits)
    assert run.tests[0].status is RunStatus.RETURNED and run.tests[0].output == b"True\n"


def test_a_crashing_interpreter_is_a_runtime_error(limits):
    result = execute_program(stdio_task(), "import ctypes\nctypes.string_at(0)", limits)
    assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "SIGSEGV" in result.detail


def test_the_trainer_survives_a_batch_of_hostile_programs(limits, tmp_path):
    hostile = ["while True:\n    pass\n", "import os\nos.kill(os.getppid(), 9)", "x = bytearray(10**11)",
               "import os\nos.killpg(0, 9)", "import os\nos._exit(3)"]
    for program in hostile:
        result = execute_program(stdio_task(), program, limits)
        assert result.test_outcomes[0] in (TestOutcome.TIMEOUT, TestOutcome.RUNTIME_ERROR)
    assert_no_leftover_processes(tmp_path)  # and this process, the trainer, is still running the test
