"""Process isolation for running generated programs (execution reward of Appendix B.5, pass@k of §4.5): the
trainer side's entry point, :func:`run_program`. Every program is treated as hostile (the policy is optimised
against this reward). This module trusts the parent's own modules below and nothing a program produces; the
threat model - what each layer enforces, what the parent checks, the residual risks - is
``docs/sandbox-threat-model.md``, which also maps each trust boundary to its module:

* trainer side: :mod:`.sandbox_types` (specs, limits, runs), :mod:`.sandbox_spec` (directories, memory files,
  the children's specs, the layers expected), :mod:`.task_bounds` (each program's tasks and CPU),
  :mod:`.fork_clients` (fork servers and children), :mod:`.sandbox_protocol` (reports, clocks, verdict assembly)
  and this module;
* fork server: :mod:`.fork_server`;
* program child: :mod:`.program_child` (its entry and report channel), :mod:`.isolation` (rlimits, task bound,
  capabilities, Landlock, the x86-64 seccomp filter), :mod:`.program_drivers` (the test drivers);
* verdict child: :mod:`.verdict_child`; plain data across the boundaries: :mod:`.plain_data`.
"""
from __future__ import annotations

import logging
from typing import Callable, List, Tuple

from .fork_clients import _ServerLost
from .sandbox_protocol import _ChildResult, _run_child, _run_humaneval
from .sandbox_spec import _ProgramFiles
from .sandbox_types import ProgramMode, ProgramRun, ProgramSpec, SandboxError, SandboxLimits, TestRun
from .task_bounds import _task_bound

# The sandbox's public names, importable from here as before the split into one module per trust boundary.
from .fork_clients import SANDBOX_SCRIPT as SANDBOX_SCRIPT
from .sandbox_spec import child_runtime_paths as child_runtime_paths, expected_isolation as expected_isolation
from .sandbox_types import RunStatus as RunStatus
from .task_bounds import TASK_BOUNDS as TASK_BOUNDS, make_task_bound as make_task_bound
from .task_bounds import task_bound_mechanism as task_bound_mechanism

logger = logging.getLogger(__name__)

_MAX_SERVER_LOSSES = 3  # fork servers lost while one program ran before that program is a sandbox error


def _continue_always(run: TestRun) -> bool:
    return True


def run_program(spec: ProgramSpec, limits: SandboxLimits = SandboxLimits(),
                on_test: Callable[[TestRun], bool] = _continue_always) -> ProgramRun:
    """Run ``spec``'s program on its tests in isolated children; ``on_test`` sees each finished test and
    returns whether to go on (the remaining tests are then not run). Whatever the program does, this returns
    (within about ``startup_timeout_s`` plus ``test_timeout_s`` per test and child) without raising: a
    failure of the sandbox itself is reported in ``ProgramRun.sandbox_error``."""
    if spec.num_tests < 1:
        raise ValueError("a program needs at least one test")
    runs: List[TestRun] = []
    expected: Tuple[str, ...] = ()
    try:
        bound = _task_bound()
        expected = expected_isolation(limits.syscall_filters, limits.restrict_reads, bound.layers)
        with _ProgramFiles(spec, limits, bound) as files:
            next_test = losses = 0
            while next_test < spec.num_tests:
                child = _child_result(files, next_test, spec, limits, expected, on_test)
                if child.compile_error is not None:
                    return ProgramRun(child.compile_error, (), expected)
                runs.extend(child.runs)
                if child.server_lost:
                    losses += 1
                    logger.warning("a fork server died: test %d runs again in a fresh child", child.next_test)
                if losses > _MAX_SERVER_LOSSES:
                    raise SandboxError(f"fork servers died {losses} times while this program ran")
                if child.stopped:
                    break
                next_test = child.next_test
    except (SandboxError, OSError) as error:
        logger.warning("sandbox error: %s", error)
        return ProgramRun(None, tuple(runs), expected, sandbox_error=str(error))
    return ProgramRun(None, tuple(runs), expected)


def _child_result(files: "_ProgramFiles", first_test: int, spec: ProgramSpec, limits: SandboxLimits,
                  expected: Tuple[str, ...], on_test: Callable[[TestRun], bool]) -> "_ChildResult":
    """One child's work from ``first_test``; if its fork server died before a test was judged, that test is
    marked to be run again in a fresh child (the server is replaced): a server's death costs no program its
    verdict."""
    run_child = _run_humaneval if spec.mode is ProgramMode.HUMANEVAL else _run_child
    try:
        return run_child(files, first_test, spec, limits, expected, on_test)
    except _ServerLost:
        return _ChildResult(runs=[], next_test=first_test, server_lost=True)


