"""The text-environment interface of step 3's multi-turn episodes (``--env``).

The contract is gymnasium's ``Env`` (Towers et al., 2024) with text for observations and actions:
``reset(task) -> (observation, info)`` and ``step(action) -> (observation, reward, terminated, truncated, info)``.
Gymnasium itself is not a dependency: its value lies in ``spaces`` (fixed-shape arrays), vectorisation and wrappers
over arrays, none of which a conversation uses, and a gymnasium ``Env`` whose spaces are ``Text`` already fits this
signature unchanged (duck-typed; nothing here checks the class). OpenEnv (what TRL's ``openenv`` integration
speaks) puts each environment behind an HTTP server in a container: the right shape for sandboxed tools at scale,
more than an offline CPU task needs; an OpenEnv client can be wrapped in a class of this shape.

What step 3 needs beyond gymnasium's signature: ``tasks(split)``, the task strings an environment trains and
evaluates on (its "dataset"), and ``reset`` deterministic given the task: the prompt dataset is built from
``reset(task)``'s first observation ahead of time, and the episode resets a fresh instance with the same task.
"""
from __future__ import annotations

from typing import List, NamedTuple, Tuple


class StepResult(NamedTuple):
    """What :meth:`TextEnvironment.step` returns (gymnasium's 5-tuple): the next observation (ignored once the
    episode ends), the reward of this turn, ``terminated`` (the task is over), ``truncated`` (the environment cut
    it short) and ``info``."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict


class TextEnvironment:
    """One episode's environment: a fresh instance per episode (it may keep the episode's state)."""

    def tasks(self, split: str) -> List[str]:
        """The task strings of ``split`` (``"train"`` or ``"eval"``), in a fixed order."""
        raise NotImplementedError

    def reset(self, task: str) -> Tuple[str, dict]:
        """Start an episode of ``task``: ``(first observation, info)``. Deterministic given ``task``."""
        raise NotImplementedError

    def step(self, action: str) -> StepResult:
        """The policy's reply ``action`` (its turn's text, special tokens dropped)."""
        raise NotImplementedError
