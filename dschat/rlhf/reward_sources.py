"""Where the scalar score r(x, y) comes from: a reward model, program execution (code tasks), or an answer
verifier (reasoning tasks)."""
from __future__ import annotations

from functools import partial
from typing import Optional, Protocol

import torch

from dschat.rlhf.experience import chunked_rows
from dschat.model import sequence_scores


class RewardSource(Protocol):
    def __call__(self, seq: torch.Tensor, attention_mask: torch.Tensor, responses: list, meta: list) -> tuple:
        """Return ``(scores [B] float tensor, counters dict)`` for a rollout batch."""


class ModelReward:
    """r(x, y) = the reward model's score at the last real token of ``[prompt | response]``, computed in chunks
    of ``micro_batch_size`` rows (all at once when None) so a large generation batch costs no more memory."""

    def __init__(self, engine, micro_batch_size: Optional[int] = None):
        self.engine = engine
        self.micro_batch_size = micro_batch_size

    @torch.no_grad()
    def __call__(self, seq, attention_mask, responses, meta):
        score = partial(sequence_scores, self.engine.module)
        return chunked_rows(score, self.micro_batch_size or seq.shape[0], seq, attention_mask), {}


class CodeExecutionReward:
    """r(x, y) = the Appendix B.5 execution reward of the program in ``y`` on the task of prompt ``x``.

    ``tasks`` is the list the prompt dataset was built from: a batch's ``index`` (from ``PromptCollator``)
    says which task each row answers. Counts of each program outcome are returned for logging.
    """

    def __init__(self, tasks: list, max_workers: int = 2, test_timeout_s: float = 4.0):
        from dschat.rewards.sandbox import SandboxLimits

        self.tasks = tasks
        self.max_workers = max_workers
        self.limits = SandboxLimits(test_timeout_s=test_timeout_s)

    def __call__(self, seq, attention_mask, responses, meta):
        from dschat.rewards.code_reward import score_completions

        if meta is None:
            raise ValueError("--reward code needs the prompt batch's task index (PromptCollator's 'index')")
        tasks = [self.tasks[i] for i in meta.tolist()]
        rewards, counts = score_completions(responses, tasks, self.limits, self.max_workers)
        return torch.tensor(rewards, dtype=torch.float32), counts


class VerifierReward:
    """r(x, y) = :func:`dschat.rewards.answer_reward` of ``y`` against the reference solution of prompt ``x``
    (``--reward verifier``): 1 for a right final answer, 0 otherwise, plus ``format_weight`` when a final answer
    is found. ``references`` is parallel to the prompt dataset's prompts: a batch's ``index`` (from
    ``PromptCollator``) says which reference each row answers."""

    def __init__(self, references: list, task: str, format_weight: float = 0.0):
        self.references = references
        self.task = task
        self.format_weight = format_weight

    def __call__(self, seq, attention_mask, responses, meta):
        from dschat.rewards import answer_reward

        if meta is None:
            raise ValueError("--reward verifier needs the prompt batch's task index (PromptCollator's 'index')")
        references = [self.references[i] for i in meta.tolist()]
        rewards = [answer_reward(r, ref, self.task, self.format_weight) for r, ref in zip(responses, references)]
        return torch.tensor(rewards, dtype=torch.float32), {}
