"""The compiler-signal reward of program synthesis (paper Appendix B.5) and the code extraction shared by
training and evaluation.

B.5 (after Shojaee et al., 2023; Liu et al., 2023)::

    R(x, y) = -0.3 + 1.3 * N_pass / (N_pass + N_fail)   if y compiles (and no test errors),
              -0.6                                     if y receives a runtime error,
              -1.0                                     if y receives a compile error.

A runtime error is any test raising (an uncaught exception, a non-zero exit status, a crash, the output or memory
limit, an output too long to compare with the expected one, or malformed); a timeout counts as a runtime error too
(the program did not terminate normally, as in CodeRL/PPOCoder, where a time-limit verdict shares the runtime-error
code of APPS' harness), and so does a sandbox error (the sandbox could not vouch for the run, e.g. a child's
isolation layers differed from those asked for: never a pass, logged and counted under ``sandbox_error``).
"""
from __future__ import annotations

import logging
import re
from typing import Dict, List, Optional, Sequence, Tuple

from dschat.data.schema import CodeTask

from .code_execution import ExecutionResult, ProgramOutcome, StopPolicy, TestOutcome, execute_programs
from .sandbox import SandboxLimits

logger = logging.getLogger(__name__)

COMPILE_ERROR_REWARD = -1.0
RUNTIME_ERROR_REWARD = -0.6
COMPILED_REWARD_FLOOR = -0.3
PASS_RATE_REWARD_SPAN = 1.3
END_OF_TEXT_MARKERS = ("<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<|EOT|>",
                       "<end_of_turn>", "<eos>", "</s>")
_PYTHON_FENCE_LANGUAGES = ("python", "python3", "py")
_FENCED_BLOCK = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.M | re.S)


def extract_code(completion: str, end_markers: Sequence[str] = END_OF_TEXT_MARKERS) -> str:
    """The program in a model completion, identically in training and evaluation.

    The text is cut at the first end-of-text marker; then the first fenced block tagged ``python`` (or
    ``python3``/``py``) is returned, else the first untagged fenced block (an unterminated fence runs to the
    end), else the text itself unchanged (a HumanEval continuation keeps its indentation).
    """
    text = completion
    for marker in end_markers:
        text = text.split(marker, 1)[0]
    blocks = [(language.lower(), body) for language, body in _FENCED_BLOCK.findall(text)]
    for wanted in (lambda language: language in _PYTHON_FENCE_LANGUAGES, lambda language: language == ""):
        for language, body in blocks:
            if wanted(language):
                return body
    return text


def code_reward(result: ExecutionResult) -> float:
    """The B.5 reward of one executed program (timeouts count as runtime errors).

    ``result`` must hold a verdict for every test unless an error ended it early (``StopPolicy.NEVER`` or
    ``FIRST_ERROR``); a malformed task has no reward.
    """
    if result.outcome is ProgramOutcome.COMPILE_ERROR:
        return COMPILE_ERROR_REWARD
    if result.outcome in (ProgramOutcome.RUNTIME_ERROR, ProgramOutcome.TIMEOUT, ProgramOutcome.SANDBOX_ERROR):
        return RUNTIME_ERROR_REWARD
    if result.outcome is ProgramOutcome.MALFORMED_TASK:
        raise ValueError(f"no reward for a malformed task: {result.detail}")
    if TestOutcome.SKIPPED in result.test_outcomes:
        raise ValueError(f"task {result.task_id}: tests were skipped after a failure; the pass rate needs "
                         "every test (run with StopPolicy.NEVER or FIRST_ERROR)")
    return COMPILED_REWARD_FLOOR + PASS_RATE_REWARD_SPAN * result.num_passed / (
        result.num_passed + result.num_failed)


def score_completions(completions: Sequence[str], tasks: Sequence[CodeTask],
                      limits: Optional[SandboxLimits] = None, max_workers: int = 2,
                      malformed_reward: float = 0.0) -> Tuple[List[float], Dict[str, int]]:
    """Rewards of ``completions[i]`` on ``tasks[i]`` and how many programs ended in each outcome.

    Extracts the code (:func:`extract_code`), runs it in the sandbox, stopping a program at its first runtime
    error or timeout, and scores it with :func:`code_reward`. A malformed task never fails the batch: its
    completions get ``malformed_reward``, are counted under ``malformed_task`` and logged (filter such tasks
    when loading the data, with :func:`~dschat.rewards.code_execution.validate_task`).
    """
    codes = [extract_code(completion) for completion in completions]
    results = execute_programs(tasks, codes, limits or SandboxLimits(), max_workers, StopPolicy.FIRST_ERROR)
    malformed = [result for result in results if result.outcome is ProgramOutcome.MALFORMED_TASK]
    if malformed:
        logger.warning("%d completions scored %s for malformed tasks, e.g. %s", len(malformed),
                       malformed_reward, malformed[0].detail)
    broken = [result for result in results if result.outcome is ProgramOutcome.SANDBOX_ERROR]
    if broken:
        logger.warning("%d completions scored %s after a sandbox error, e.g. %s", len(broken),
                       RUNTIME_ERROR_REWARD, broken[0].detail)
    rewards = [malformed_reward if result.outcome is ProgramOutcome.MALFORMED_TASK else code_reward(result)
               for result in results]
    counts = {outcome.value: 0 for outcome in ProgramOutcome}
    for result in results:
        counts[result.outcome.value] += 1
    return rewards, counts
