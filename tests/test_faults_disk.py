"""Saves survive every way a write fails, and the output directory is checked before any work (issue 24,
faults 1 and 6): a full disk at real size (the demo models' 24 MB checkpoints on a 40 MB tmpfs), I/O errors,
quota and read-only filesystems (injected under torch's writer, which turns them into ``RuntimeError``) all end
in one line naming the path and the cause, the partial step removed and ``latest`` unchanged; a read-only or
too small ``--output_dir`` is one line before training."""
from __future__ import annotations

import errno
import importlib.util
import os
import sys

import pytest

from conftest import ROOT, TINY_PPO, on_tmpfs, tmpfs_available
from dschat.training import checkpoint
from dschat.training.checkpoint import CheckpointSaveError, TrainState, save_checkpoint

needs_tmpfs = pytest.mark.skipif(not tmpfs_available(), reason="needs user+mount namespaces to mount a tmpfs")


def _harness():
    spec = importlib.util.spec_from_file_location(
        "checkpoint_harness", os.path.join(ROOT, "tests", "fixtures", "faults", "checkpoint_harness.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _FailingFile:
    """A binary file whose writes fail with ``code`` once ``budget`` bytes were written (a disk failing under
    the writer, as ENOSPC, EIO, EDQUOT or EROFS do)."""

    def __init__(self, handle, code: int, budget: int):
        self.handle, self.code, self.budget = handle, code, budget

    def write(self, data):
        self.budget -= len(data)
        if self.budget < 0:
            raise OSError(self.code, os.strerror(self.code), self.handle.name)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


@pytest.mark.parametrize("code, cause", [(errno.ENOSPC, "no space left on device"),
                                         (errno.EIO, "input/output error"),
                                         (errno.EDQUOT, "disk quota exceeded"),
                                         (errno.EROFS, "read-only file system")],
                         ids=["ENOSPC", "EIO", "EDQUOT", "EROFS"])
def test_a_failed_write_under_torch_names_path_and_cause_and_keeps_latest(tmp_path, monkeypatch, code, cause):
    harness = _harness()
    harness.init_distributed()
    engines = harness.build_engines(0)
    harness.set_step(engines, 1)
    save_checkpoint(str(tmp_path), engines, TrainState(global_step=1), extra={"step": 1})
    real_open = open

    def failing_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return _FailingFile(handle, code, 4096) if mode == "wb" else handle

    monkeypatch.setattr(checkpoint, "open", failing_open, raising=False)
    harness.set_step(engines, 2)
    with pytest.raises(CheckpointSaveError) as caught:
        save_checkpoint(str(tmp_path), engines, TrainState(global_step=2), extra={"step": 2})
    message = str(caught.value)
    staging = f"{tmp_path}/checkpoints/step2.partial"
    assert message == (f"could not save checkpoint step2 to {staging}: {cause} (writing {staging}/actor/"
                       f"mp_rank_00_model_states.pt); the partial step was removed and the previous checkpoint "
                       f"{tmp_path}/checkpoints/step1 is kept")
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["latest", "step1"]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step1"
    monkeypatch.undo()
    assert harness.resume_and_check(str(tmp_path), engines) == 1


def test_torch_writer_error_without_an_errno_is_one_line(tmp_path, monkeypatch):
    """torch's ``[enforce fail at inline_container.cc] unexpected pos`` with no OSError behind it (a disk that
    is not full): its own words, as an I/O error."""
    harness = _harness()
    harness.init_distributed()
    engines = harness.build_engines(0)

    def torch_save(obj, handle, **kwargs):
        handle.write(b"PK\x03\x04")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4 vs 0")

    monkeypatch.setattr(checkpoint.torch, "save", torch_save)
    with pytest.raises(CheckpointSaveError, match=r"could not save checkpoint step1 to .*step1\.partial: write failed "
                                                  r"\(\[enforce fail at inline_container\.cc:672\] \. unexpected pos"):
        save_checkpoint(str(tmp_path), engines, TrainState(global_step=1), extra={"step": 1})
    assert os.listdir(tmp_path / "checkpoints") == []


def _ppo(out, *extra) -> list:
    return [sys.executable, "-m", "dschat.cli.ppo", *TINY_PPO, "--output_dir", str(out), *extra]


def _errors(result) -> list:
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@needs_tmpfs
@pytest.mark.slow
def test_full_disk_at_real_size_during_a_ppo_run(tmp_path):
    """40 MB tmpfs, demo models: step 1's checkpoint (24 MB) fits, step 2's does not (was: two tracebacks from
    torch's RuntimeError and a step2.partial left on the full disk)."""
    out = tmp_path / "run"
    out.mkdir()
    result = on_tmpfs(out, "size=40m", ["sh", "-c", " ".join(_ppo(out, "--max_steps", "3", "--save_steps", "1"))
                                        + f"; echo rc=$?; ls {out}/checkpoints; cat {out}/checkpoints/latest"])
    errors = _errors(result)
    staging = f"{out}/checkpoints/step2.partial"
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(f"error: could not save checkpoint step2 to {staging}: no space left on device "
                                f"(writing {staging}/"), errors
    assert errors[0].endswith(f"_model_states.pt); the partial step was removed and the previous checkpoint "
                              f"{out}/checkpoints/step1 is kept"), errors
    listing = result.stdout[result.stdout.index("rc=2"):].split()
    assert listing == ["rc=2", "latest", "step1", "step1"], listing


@needs_tmpfs
def test_read_only_output_dir_is_one_line_before_any_work(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    result = on_tmpfs(out, "ro,size=1m", _ppo(out / "run", "--max_steps", "1"), timeout=300)
    assert result.returncode == 2
    assert _errors(result) == [f"error: --output_dir {out}/run: not writable (Read-only file system); choose a "
                               "directory this user can write"]
    assert "resuming" not in result.stdout and "step 0" not in result.stdout  # nothing was built or evaluated


@needs_tmpfs
def test_too_little_space_for_one_checkpoint_is_one_line_before_training(tmp_path):
    out = tmp_path / "small"
    out.mkdir()
    result = on_tmpfs(out, "size=16m", _ppo(out, "--max_steps", "2"), timeout=600)
    assert result.returncode == 2
    errors = _errors(result)
    assert len(errors) == 1 and errors[0].startswith(f"error: --output_dir {out}: "), errors
    assert " free, but one checkpoint of the actor, critic needs about 23." in errors[0], errors
    assert not os.path.exists(out / "metrics.jsonl") or "step 1 |" not in result.stdout


def test_a_failed_final_model_save_is_one_line(tmp_path, monkeypatch, tokenizer):
    """safetensors reports a full disk as its own error type (not OSError): one line naming the directory."""
    from safetensors import SafetensorError

    from dschat.training.checkpoint import save_hf_model
    from dschat.training.faults import RunStopped

    harness = _harness()
    harness.init_distributed()
    actor = harness.build_engines(0)["actor"]
    full = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'

    def save_pretrained(*args, **kwargs):
        raise SafetensorError(full)

    monkeypatch.setattr(actor.module, "save_pretrained", save_pretrained)
    with pytest.raises(RunStopped) as caught:
        save_hf_model(actor, tokenizer, str(tmp_path / "actor"))
    assert str(caught.value) == (f"could not save the model to {tmp_path}/actor: {full}; the resumable checkpoints "
                                 "are unaffected (--resume continues from the newest)")
