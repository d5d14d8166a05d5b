"""Round 4 of the hostile policy against the sandbox (issue 39): a program's threads and CPU stay its own, and no
value a program returns costs the trainer more than linear time.

* Thread flood: a program that starts threads without end, beside honest programs, in a "container" (a pids
  cgroup with a small ``pids.max`` around a trainer process, as a deployment has): the honest programs' verdicts
  must be the ones they get alone, the trainer must still start a thread, and the flood is held to its own bound
  (each mechanism of ``task_bounds.TASK_BOUNDS`` this machine offers).
* The trainer's CPU for a hash-colliding set (and dict) returned by a call-based program is bounded.
* Correct programs the reference harnesses pass: an iterator where HumanEval's test materialises it, ``Decimal``
  where APPS' ``==`` accepts it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dschat.rewards import sandbox, task_bounds

REPOSITORY = str(Path(__file__).resolve().parents[1])
CONTAINER_PIDS = 200  # the "container's" pids.max: room for the trainer, its fork servers and 8 programs

FLOOD = textwrap.dedent("""\
    import threading, time
    threading.stack_size(65536)
    end = time.monotonic() + 4
    while time.monotonic() < end:  # take every task it can, and keep trying for 4 s
        try:
            threading.Thread(target=time.sleep, args=(6,), daemon=True).start()
        except RuntimeError:
            time.sleep(0.001)
    print(input())
    """)
HONEST = [
    "print(input())\n",
    textwrap.dedent("""\
        import sys, threading
        threading.stack_size(1 << 26)  # the competitive programmer's deep-recursion idiom: one thread
        sys.setrecursionlimit(10 ** 5)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        def main():
            print(depth(int(input()) * 1000) // 1000)
        thread = threading.Thread(target=main)
        thread.start()
        thread.join()
        """),
]
CONTAINED_TRAINER = textwrap.dedent("""\
    import json, sys, threading, time
    sys.stdin.readline()  # the test has moved this process into its container cgroup
    from dschat.rewards import SandboxLimits, execute_program, execute_programs, task_bounds
    from dschat.data.schema import CodeTask
    mechanism, tmp_root, flood, honest = json.loads(sys.argv[1])
    task_bounds._TASK_BOUND[:] = [task_bounds.make_task_bound(mechanism)]
    limits = SandboxLimits(test_timeout_s=8.0, tmp_root=tmp_root)
    task = CodeTask(task_id="seven", prompt="", inputs=["7\\n"], outputs=["7\\n"])
    programs = [honest[index % len(honest)] for index in range(7)]

    def verdicts():
        results = execute_programs([task] * len(programs), programs, limits, max_workers=len(programs))
        return [(result.outcome.value, result.detail) for result in results]

    alone = verdicts()
    flooded = {}
    flooder = threading.Thread(target=lambda: flooded.update(result=execute_program(task, flood, limits)))
    flooder.start()
    time.sleep(1.5)  # the flood now holds what it could take
    beside = verdicts()
    try:
        thread = threading.Thread(target=time.sleep, args=(0,))
        thread.start()
        thread.join()
        trainer_thread = "started"
    except RuntimeError as error:
        trainer_thread = str(error)
    flooder.join()
    print(json.dumps({"alone": alone, "beside": beside, "trainer_thread": trainer_thread,
                      "flood": flooded["result"].outcome.value, "isolation": flooded["result"].isolation}))
    """)


def container_cgroups(name: str, controls: dict) -> list:
    """New cgroup v1 cgroups beside the test's own, one per hierarchy in ``controls`` (``{"pids": {"pids.max":
    "200"}, "cpu": {...}}``), as a container's; or skip where they cannot be made."""
    made = []
    try:
        own = task_bounds._own_cgroups()
        for hierarchy, files in controls.items():
            directory = Path(own[hierarchy][0]) / name
            directory.mkdir()
            made.append(directory)
            for control, value in files.items():
                (directory / control).write_text(value)
    except (OSError, KeyError) as error:
        for directory in made:
            remove_cgroup(directory)
        pytest.skip(f"needs writable cgroup v1 {sorted(controls)} hierarchies ({error!r})")
    return made


def remove_cgroup(directory: Path) -> None:
    for child in directory.iterdir():
        if child.is_dir():
            remove_cgroup(child)
    for pid in (directory / "cgroup.procs").read_text().split():
        os.kill(int(pid), 9)
    deadline = time.monotonic() + 5
    while (directory / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    directory.rmdir()


def run_contained(script: str, arguments: list, controls: dict, name: str, preexec=None) -> dict:
    """Run ``script`` (a trainer) in a new process inside new cgroups (``container_cgroups``); its JSON report."""
    containers = container_cgroups(f"dschat-test-{name}-{os.getpid()}", controls)
    trainer = subprocess.Popen([sys.executable, "-c", script, json.dumps(arguments)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=REPOSITORY), preexec_fn=preexec)
    try:
        for directory in containers:
            (directory / "cgroup.procs").write_text(str(trainer.pid))
        out, err = trainer.communicate("go\n", timeout=240)
    finally:
        trainer.kill()
        trainer.wait()
        for directory in containers:
            remove_cgroup(directory)
    assert trainer.returncode == 0, err[-3000:]
    return json.loads(out)


NOBODY = 65534


def as_nobody() -> None:
    """The real uid of a non-root trainer (the kernel counts ``RLIMIT_NPROC`` per real uid), keeping root's
    effective uid so that the interpreter's files stay readable."""
    os.setresuid(NOBODY, 0, 0)


@pytest.mark.parametrize("mechanism", ["cgroup_v1", "uid", "nproc"])
def test_a_thread_flood_takes_neither_its_neighbours_tasks_nor_the_trainers(tmp_path, mechanism):
    """Class 1: a program held 4,000 threads; beside it 6 of 7 honest programs were sandbox errors ("fork server
    could not fork: EAGAIN") and the trainer could not start a thread. Now, in a container of 200 tasks: the
    flood is held to its own ``max_tasks`` (and passes its own test), every honest program (one of them starts a
    thread) gets the verdict it gets alone, and the trainer starts a thread."""
    if mechanism == "nproc" and os.getuid() == 0 and os.geteuid() == 0:
        preexec = as_nobody  # a non-root trainer's bound, from a root test
    elif task_bounds.make_task_bound(mechanism) is None:
        pytest.skip(f"the {mechanism} bound does not work here")
    else:
        preexec = None
    report = run_contained(CONTAINED_TRAINER, [mechanism, str(tmp_path), FLOOD, HONEST],
                           {"pids": {"pids.max": str(CONTAINER_PIDS)}}, f"flood-{mechanism}", preexec)
    assert report["alone"] == [["passed", ""]] * 7, report["alone"]
    assert report["beside"] == report["alone"], report["beside"]
    assert report["trainer_thread"] == "started"
    assert report["flood"] == "passed"
    assert {"cgroup_v1": "tasks_cgroup", "uid": "tasks_uid", "nproc": "tasks_nproc"}[mechanism] in report["isolation"]


def test_a_delegated_cgroup_v2_subtree_is_used_as_the_kernel_expects(tmp_path, monkeypatch):
    """cgroup v2 (not mounted with controllers on this machine, so on a stand-in directory): pids and cpu are
    enabled for the trainer's cgroup's children, each slot gets ``pids.max`` and ``cpu.max``, its fork servers
    are written into its ``cgroup.procs``, and the child is told the path ``/proc/self/cgroup`` will show."""
    own = tmp_path / "delegated"
    own.mkdir()
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(task_bounds, "_own_cgroups", lambda: {"": (str(own), "/user.slice/trainer")})
    layers = task_bounds._cgroup_layers("cgroup_v2")
    assert (own / "cgroup.subtree_control").read_text() == "+pids +cpu"
    bound = task_bounds._TaskBound("cgroup_v2", layers)
    name = f"dschat-sandbox-{os.getpid()}-0"  # a new bound's first slot; the kernel makes a cgroup's files
    (own / name).mkdir()
    for control in ("pids.max", "cpu.max", "cgroup.procs"):
        (own / name / control).write_text("")
    slot, spec = bound.acquire(sandbox.SandboxLimits(max_tasks=8, cpu_quota=0.5))
    assert slot == 0
    assert (own / name / "pids.max").read_text() == "9"  # the slot's fork server is the one more
    assert (own / name / "cpu.max").read_text() == "50000 100000"
    assert spec["cgroups"] == {"tasks_cgroup": ["", f"/user.slice/trainer/{name}"],
                               "cpu_cgroup": ["", f"/user.slice/trainer/{name}"]}
    bound.place(slot, 4242)
    assert (own / name / "cgroup.procs").read_text() == "4242"
    assert bound.layers == ("tasks_cgroup", "cpu_cgroup")


def test_the_last_task_bound_refuses_every_thread(tmp_path, monkeypatch):
    """Where no cgroup, uid or ``RLIMIT_NPROC`` bound works (root without its slots' uids mapped), the seccomp
    filter refuses every thread: the flood gets none, a program starting one thread is its own runtime error, a
    program without threads passes."""
    from dschat.rewards import SandboxLimits, execute_program
    from dschat.data.schema import CodeTask

    bound = task_bounds.make_task_bound("seccomp")
    if bound is None or "seccomp" not in sandbox.expected_isolation(True, True):
        pytest.skip("needs the seccomp filter (x86-64)")
    monkeypatch.setattr(task_bounds, "_TASK_BOUND", [bound])
    task = CodeTask(task_id="seven", prompt="", inputs=["7\n"], outputs=["7\n"])
    limits = SandboxLimits(test_timeout_s=8.0, tmp_root=str(tmp_path))
    counting = FLOOD.replace("end = time.monotonic() + 4", "end = time.monotonic() + 0.5").replace(
        "print(input())", "print(threading.active_count())")
    results = [execute_program(task, program, limits) for program in (HONEST[0], HONEST[1], counting)]
    assert [result.outcome.value for result in results] == ["passed", "runtime_error", "failed"], results
    assert "can't start new thread" in results[1].detail and "got '1\\n'" in results[2].detail, results
    assert all("tasks_seccomp" in result.isolation for result in results)


# --------------------------------------------------------------------- class 3: the trainer's cost of a value

MODULUS = 2 ** 61 - 1  # CPython hashes an int as its value modulo this prime
BIG = (2 ** 4000 // MODULUS) * MODULUS
# 5,000 integers of 4,000 bits that all hash alike and share their leading digits: each comparison is long
COLLIDING = f"[{BIG} + k * {MODULUS} for k in range(1, 5001)]"
ANSWER = [BIG + k for k in range(1, 5001)]  # a correct answer as long as the colliding value


def trainer_cpu(function) -> tuple:
    """``function()`` and the CPU seconds this process (the trainer, all threads) spent on it."""
    started = time.process_time()
    value = function()
    return value, time.process_time() - started


@pytest.mark.parametrize("returned, expected", [
    (f"set({COLLIDING})", ANSWER),
    (f"dict.fromkeys({COLLIDING}, 1)", {str(value): 1 for value in ANSWER}),
    (f"{{'k': frozenset({COLLIDING})}}", {"k": ANSWER}),
], ids=["set", "dict", "frozenset_in_dict"])
def test_a_hash_colliding_value_costs_the_trainer_linear_time(tmp_path, returned, expected):
    """Class 3: a set of 5,000 integers that hash alike, returned by a call-based program, took the trainer
    5.0-5.7 s of CPU to build for 3 tests (here: 3.2-3.9 s, each case). Now nothing a program returns is hashed
    in the trainer (a mapping is matched against the expected dict's own table): the value fails, and the
    trainer spends under 1.5 s (0.3-0.5 s on idle cores, 0.84 s for the dict beside a loaded suite: the
    bound keeps a margin for shared cores and still fails the quadratic 3.2-3.9 s)."""
    from dschat.rewards import SandboxLimits, TestOutcome, execute_program
    from dschat.data.schema import CodeTask

    task = CodeTask(task_id="colliding", prompt="", fn_name="f", inputs=[[0]] * 3, outputs=[expected] * 3)
    program = f"def f(x):\n    return {returned}\n"
    limits = SandboxLimits(test_timeout_s=20.0, tmp_root=str(tmp_path))
    result, seconds = trainer_cpu(lambda: execute_program(task, program, limits))
    assert result.test_outcomes == (TestOutcome.FAILED,) * 3, result.detail
    assert seconds < 1.5, seconds


# ------------------------------------------------------------------------- class 2: threads take others' CPU

HOG = textwrap.dedent("""\
    import hashlib, threading, time
    def hog():  # hashlib releases the GIL: every thread takes a CPU
        data = b"x" * (1 << 20)
        end = time.monotonic() + 6
        while time.monotonic() < end:
            hashlib.sha256(data).digest()
    threads = []
    for _ in range(64):
        try:
            threads.append(threading.Thread(target=hog))
            threads[-1].start()
        except RuntimeError:  # its bound on tasks
            threads.pop()
            break
    for thread in threads:
        thread.join()
    print(input())
    """)
NEEDS_CPU = textwrap.dedent("""\
    total = 0
    for value in range(3_000_000):  # about 0.3 s of one CPU
        total += value
    print(input())
    """)


HOGGED_TRAINER = textwrap.dedent("""\
    import json, sys, time
    from concurrent.futures import ThreadPoolExecutor
    sys.stdin.readline()  # the test has moved this process into its container cgroups
    from dschat.rewards import SandboxLimits, execute_program, task_bounds
    from dschat.data.schema import CodeTask
    tmp_root, hog, honest = json.loads(sys.argv[1])
    task = CodeTask(task_id="seven", prompt="", inputs=["7\\n"], outputs=["7\\n"])
    limits = SandboxLimits(test_timeout_s=2.0, tmp_root=tmp_root)
    hog_limits = SandboxLimits(test_timeout_s=10.0, tmp_root=tmp_root)  # the hogs outlast the honest program
    alone = execute_program(task, honest, limits)
    with ThreadPoolExecutor(max_workers=7) as pool:
        hogs = [pool.submit(execute_program, task, hog, hog_limits) for _ in range(7)]
        time.sleep(2.0)  # the hogs now run their threads
        started = time.monotonic()
        beside = execute_program(task, honest, limits)
        beside_s = time.monotonic() - started
        for future in hogs:
            future.result()
    print(json.dumps({"alone": [alone.outcome.value, alone.detail], "beside": [beside.outcome.value, beside.detail],
                      "beside_s": beside_s, "layers": task_bounds._task_bound().layers}))
    """)


def test_an_honest_programs_verdict_is_the_same_beside_seven_64_thread_hogs(tmp_path):
    """Class 2: in a container with a CPU quota, beside a 64-thread hashlib hog, an honest program needing 0.5 s
    of CPU took 12.2 s and timed out (inside a cgroup, threads compete one by one: the kernel's per-session
    autogroups do not apply). Now each program's threads share a quota of one CPU in a cgroup of their own and a
    test's time limit counts wall-clock time less the program's waits for a CPU: in a container of one CPU,
    beside seven hogs (hashing for 6 s under a longer limit of their own), the honest program passes, as it does
    alone."""
    report = run_contained(HOGGED_TRAINER, [str(tmp_path), HOG, NEEDS_CPU],
                           {"cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"}}, "hogs")
    assert "cpu_cgroup" in report["layers"], report["layers"]
    assert report["alone"] == ["passed", ""], report["alone"]
    assert report["beside"] == report["alone"], report
