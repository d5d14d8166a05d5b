"""Extension build locks: a lock left by a killed build no longer makes every later start sleep forever, a held
lock is named in one line, and the CPU path compiles nothing at start (issue: first contact, item 1)."""
import logging
import os
import subprocess
import sys
import time

from dschat.core.compile_lock import check_compile_locks, lock_holders

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_lock(root, op="deepspeed_shm_comm"):
    lock = root / op / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    return lock


def test_stale_lock_is_removed_with_one_line(tmp_path, caplog):
    lock = make_lock(tmp_path)
    with caplog.at_level(logging.WARNING):
        removed = check_compile_locks([tmp_path])
    assert removed == [lock] and not lock.exists()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and str(lock) in lines[0] and "stale" in lines[0] and "since" in lines[0]


def test_held_lock_is_named_and_kept(tmp_path, caplog):
    lock = make_lock(tmp_path, "cpu_adam")
    holder = subprocess.Popen([sys.executable, "-c", f"import os, time; os.open({str(lock)!r}, os.O_RDONLY); "
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lock_holders(lock) == [holder.pid]
        with caplog.at_level(logging.WARNING):
            assert check_compile_locks([tmp_path]) == []
        assert lock.exists()
        [line] = [r.getMessage() for r in caplog.records]
        assert str(lock) in line and str(holder.pid) in line and "since" in line
    finally:
        holder.kill()
        holder.wait()


def test_cpu_start_with_a_stale_lock_neither_waits_nor_compiles(tmp_path):
    """A killed build's lock on the op DeepSpeed's CPU backend used to build at every fresh start: the start
    returns promptly, removes the lock and builds nothing."""
    lock = make_lock(tmp_path)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "DS_ACCELERATOR": "cpu", "PYTHONPATH": REPO}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", "from dschat.core.distributed import init_distributed; "
                             "print(init_distributed()[:2])"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "(0, 1)"
    assert not lock.exists() and os.listdir(lock.parent) == []  # nothing built there
    assert time.monotonic() - start < 100
