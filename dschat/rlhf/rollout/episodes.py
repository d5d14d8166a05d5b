"""Multi-turn episodes against an environment (``--env``), token in, token out.

Each row of a rollout batch is one episode: its prompt is the first observation of its task (the prompt dataset
tokenised it), then, turn by turn, the rollout engine samples a reply on the episode's tokens so far, the reply's
tokens are kept exactly as sampled (up to and including its eos), its text (decoded, special tokens dropped) goes to
the environment, and the observation it returns is tokenised once and appended (:mod:`.turns`). The episode is ONE
token sequence in the trainer's layout (``[left-padded prompt | episode, right-padded]``); the trainer's log-probs
are taken on exactly these tokens. ``action_mask`` is 1 on the replies' tokens only: observation tokens are context,
not actions, so no loss, KL, entropy or advantage reads them.

An episode ends when the environment says so (``terminated`` / ``truncated``), after ``max_turns`` replies, when a
reply reaches the token budget (``max_episode_tokens`` after the prompt: the reply is cut there), or on an
environment error (``step`` or ``reset`` raised, or an observation does not fit in the budget). Its score is the sum
of the rewards the environment gave (0 for an episode that ended before any), placed like a reward model's score at
the episode's last reply token. Counts of each ending are logged (``episode/*``); an error never stops the run.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch

from dschat.rlhf.environments import make_environment

from .base import Rollout, RolloutEngine
from .turns import observation_ids

logger = logging.getLogger(__name__)


@dataclass
class Episode:
    """One episode's tokens after the prompt, which of them are actions, and how it ended."""

    environment: object
    tokens: List[int] = field(default_factory=list)
    actions: List[int] = field(default_factory=list)
    entropy: List[float] = field(default_factory=list)
    engine_logprobs: List[float] = field(default_factory=list)
    rewards: List[float] = field(default_factory=list)
    turns: int = 0
    ended: str = ""
    """'' while running, then ``done | truncated | error``."""

    def append(self, tokens: Sequence[int], action: bool, entropy: Optional[List[float]] = None,
               engine_logprobs: Optional[List[float]] = None) -> None:
        """``tokens`` at the episode's end, with the engine's entropy and log-prob of each (0 where none)."""
        self.tokens.extend(tokens)
        self.actions.extend([int(action)] * len(tokens))
        self.entropy.extend(entropy if entropy is not None else [0.0] * len(tokens))
        self.engine_logprobs.extend(engine_logprobs if engine_logprobs is not None else [0.0] * len(tokens))


def reply_tokens(generated: Sequence[int], eos_token_id: int) -> List[int]:
    """The sampled reply: ``generated`` up to and including its first eos (all of it without one)."""
    generated = list(generated)
    return generated[:generated.index(eos_token_id) + 1] if eos_token_id in generated else generated


def left_padded(rows: List[List[int]], pad_token_id: int) -> tuple:
    """``(ids [A, W], mask [A, W])`` of token lists, left-padded to the longest."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[index, width - len(row):] = 1
    return ids, mask


class EpisodeRunner:
    """Runs the episodes of ``--env`` on a rollout engine: ``tasks`` are the task strings the prompt dataset was
    built from (a batch's ``index`` says which row plays which)."""

    def __init__(self, environment: str, tasks: List[str], tokenizer, engine: RolloutEngine, max_turns: int,
                 max_episode_tokens: int):
        self.environment, self.tasks, self.tokenizer, self.engine = environment, tasks, tokenizer, engine
        self.max_turns, self.budget = max_turns, max_episode_tokens
        self.engine_logprobs = False  # whether the engine returned its sampled tokens' log-probs (vLLM)

    def start(self, task: str) -> Episode:
        episode = Episode(make_environment(self.environment))
        try:
            episode.environment.reset(task)
        except Exception as error:  # the environment's fault: counted, never the run's end
            self.fail(episode, f"reset({task!r}) raised {error!r}")
        return episode

    @staticmethod
    def fail(episode: Episode, why: str) -> None:
        logger.warning("environment error, episode ended: %s", why)
        episode.ended = "error"

    @torch.no_grad()
    def run(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, meta: torch.Tensor, sampling,
            record_entropy: bool = False) -> Rollout:
        """The episodes of a left-padded prompt batch whose rows play the tasks ``meta`` (indices into
        ``tasks``), as one :class:`Rollout` carrying its own masks and scores (module docstring)."""
        if meta is None:
            raise ValueError("--env needs the prompt batch's task index (PromptCollator's 'index')")
        episodes = [self.start(self.tasks[index]) for index in meta.tolist()]
        prompt_rows = [row[mask.bool()].tolist() for row, mask in zip(prompts.cpu(), prompt_mask.cpu())]
        for turn in range(self.max_turns):
            active = [row for row, episode in enumerate(episodes) if not episode.ended]
            if not active:
                break
            self.play_turn([episodes[row] for row in active], [prompt_rows[row] for row in active], sampling,
                           record_entropy, last=turn == self.max_turns - 1, device=prompts.device)
        return self.assemble(episodes, prompts, prompt_mask, record_entropy)

    def play_turn(self, episodes: List[Episode], prompts: List[List[int]], sampling, record_entropy: bool,
                  last: bool, device: torch.device) -> None:
        """One reply of each running episode, sampled together, and the environment's answer to each."""
        ids, mask = left_padded([prompt + episode.tokens for prompt, episode in zip(prompts, episodes)],
                                self.tokenizer.pad_token_id)
        width = ids.shape[1]
        room = [self.budget - len(episode.tokens) for episode in episodes]
        turn_sampling = dataclasses.replace(sampling, max_new_tokens=min(sampling.max_new_tokens, max(room)))
        rollout = self.engine.generate(ids.to(device), mask.to(device), turn_sampling, record_entropy)
        generated = rollout.seq[:, width:].cpu()
        self.engine_logprobs = rollout.engine_logprobs is not None
        for row, episode in enumerate(episodes):
            sampled = reply_tokens(generated[row].tolist(), self.tokenizer.eos_token_id)
            reply = sampled[:room[row]]
            positions = slice(width - 1, width - 1 + len(reply))
            episode.append(reply, action=True,
                           entropy=None if rollout.entropy is None else rollout.entropy[row, positions].tolist(),
                           engine_logprobs=None if rollout.engine_logprobs is None
                           else rollout.engine_logprobs[row, positions].tolist())
            episode.turns += 1
            if len(reply) == room[row] and reply[-1] != self.tokenizer.eos_token_id:
                episode.ended = "truncated"  # the reply reached the token budget unfinished
                continue
            self.answer(episode, self.tokenizer.decode(reply, skip_special_tokens=True), last)

    def answer(self, episode: Episode, text: str, last: bool) -> None:
        """The environment's step on a reply's ``text``; its observation appended unless the episode ends."""
        try:
            result = episode.environment.step(text)
            episode.rewards.append(float(result[1]))
        except Exception as error:
            self.fail(episode, f"step raised {error!r}")
            return
        observation, _, terminated, truncated, _ = result
        if terminated or truncated or last:
            episode.ended = "done" if terminated else "truncated"
            return
        tokens = observation_ids(self.tokenizer, observation)
        if len(episode.tokens) + len(tokens) >= self.budget:  # no room left for a reply after it
            self.fail(episode, f"an observation of {len(tokens)} tokens past the budget of {self.budget}")
            return
        episode.append(tokens, action=False)

    def assemble(self, episodes: List[Episode], prompts: torch.Tensor, prompt_mask: torch.Tensor,
                 record_entropy: bool) -> Rollout:
        """The episodes in the trainer's layout, with their masks, scores and ``episode/*`` statistics."""
        rows, prompt_len = prompts.shape
        width = max(1, max(len(episode.tokens) for episode in episodes))
        seq = torch.full((rows, prompt_len + width), self.tokenizer.pad_token_id, dtype=torch.long)
        seq[:, :prompt_len] = prompts.cpu()
        attention_mask = torch.zeros_like(seq)
        attention_mask[:, :prompt_len] = prompt_mask.cpu()
        action_mask = torch.zeros((rows, prompt_len + width - 1), dtype=torch.long)
        entropy, engine_logprobs = torch.zeros(action_mask.shape), torch.zeros(action_mask.shape)
        for row, episode in enumerate(episodes):
            end = prompt_len + len(episode.tokens)
            seq[row, prompt_len:end] = torch.tensor(episode.tokens, dtype=torch.long)
            attention_mask[row, prompt_len:end] = 1
            action_mask[row, prompt_len - 1:end - 1] = torch.tensor(episode.actions, dtype=torch.long)
            entropy[row, prompt_len - 1:end - 1] = torch.tensor(episode.entropy)
            engine_logprobs[row, prompt_len - 1:end - 1] = torch.tensor(episode.engine_logprobs)
        device = prompts.device
        scores = torch.tensor([sum(episode.rewards) for episode in episodes], dtype=torch.float32)
        return Rollout(seq.to(device), entropy=entropy.to(device) if record_entropy else None,
                       engine_logprobs=engine_logprobs.to(device) if self.engine_logprobs else None,
                       stats=episode_statistics(episodes),
                       attention_mask=attention_mask.to(device), action_mask=action_mask.to(device),
                       scores=scores.to(device))


def episode_statistics(episodes: List[Episode]) -> dict:
    """``episode/*``: mean turns and observation tokens per episode, mean reward per turn, and the number of
    episodes truncated (token budget, ``--max_turns`` or the environment) and ended by an environment error."""
    count = len(episodes)
    turns = sum(episode.turns for episode in episodes)
    observation_tokens = sum(len(episode.tokens) - sum(episode.actions) for episode in episodes)
    rewards = [reward for episode in episodes for reward in episode.rewards]
    return {key: torch.tensor(float(value)) for key, value in {
        "episode/turns": turns / count,
        "episode/observation_tokens": observation_tokens / count,
        "episode/turn_reward": sum(rewards) / max(len(rewards), 1),
        "episode/truncated": sum(episode.ended == "truncated" for episode in episodes),
        "episode/env_errors": sum(episode.ended == "error" for episode in episodes),
    }.items()}
