"""Step 3 with the execution reward (paper §B.5): the reward source maps rollouts to their tasks, and PPO /
MA-PPO with ``--reward code`` run end to end on HumanEval tasks with a tiny model, logging outcome counts."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import read_metrics
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.reward_sources import CodeExecutionReward
from dschat.data import load_code_tasks


@pytest.fixture(scope="module")
def humaneval_tasks():
    return load_code_tasks("humaneval", split="test")[:3]


def test_code_reward_source_scores_each_row_against_its_own_task(humaneval_tasks):
    tasks = humaneval_tasks
    canonical = [task.solutions[0][len(task.prompt):] for task in tasks]
    responses = [canonical[2], "    return None\n", "    def broken(:\n", canonical[0]]
    index = torch.tensor([2, 1, 0, 0])
    source = CodeExecutionReward(tasks, max_workers=2)
    scores, counts = source(None, None, responses, index)
    assert scores[0].item() == pytest.approx(1.0)  # passes every test: -0.3 + 1.3
    assert scores[1].item() in (pytest.approx(-0.6), pytest.approx(-0.3))  # wrong answer: fails or raises
    assert scores[2].item() == pytest.approx(-1.0)  # syntax error
    assert scores[3].item() == pytest.approx(1.0)
    assert counts["passed"] == 2 and counts["compile_error"] == 1
    with pytest.raises(ValueError, match="task index"):
        source(None, None, responses, None)


@pytest.mark.parametrize("rule", [["--termination", "fixed", "--ngram", "1"],
                                  ["--termination", "parsing"]], ids=["ppo", "mappo-parsing-code"])
def test_ppo_with_execution_reward_runs_end_to_end(tmp_path, rule):
    ppo_main(["--reward", "code", "--data_name", "humaneval", "--allow_eval_set_training",
              "--actor_model_name_or_path", "tiny-gemma",
              "--output_dir", str(tmp_path), "--max_prompt_seq_len", "160", "--max_new_tokens", "16",
              "--per_device_generation_batch_size", "4", "--per_device_train_batch_size", "4",
              "--max_steps", "2", "--max_eval_samples", "40", "--temperature", "1.0", "--top_k", "5",
              "--warmup_steps", "0", "--no_progress_bar", "--log_samples", "0", *rule])
    train = [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]
    assert len(train) == 2
    for record in train:
        outcomes = sum(record[f"reward/{k}"] for k in ("passed", "failed", "runtime_error", "timeout",
                                                       "compile_error", "malformed_task"))
        assert outcomes == 4
        assert -1.0 <= record["objective/score"] <= 1.0


def test_code_flags_reach_both_reward_sources(humaneval_tasks, tmp_path):
    """``--code_workers`` and ``--code_test_timeout`` (non-default values) reach the training and the evaluation
    source, each scoring against its own task list (mutation: a flag or a task list dropped or swapped)."""
    from dschat.cli.ppo import build_parser
    from dschat.stages.ppo import make_reward_sources

    args = build_parser().parse_config(["--reward", "code", "--code_workers", "3", "--code_test_timeout", "1.5",
                                             "--output_dir", str(tmp_path)])
    train_tasks, eval_tasks = humaneval_tasks[:2], humaneval_tasks[2:]
    train, evaluation = make_reward_sources(args, engines=None, train_tasks=train_tasks, eval_tasks=eval_tasks)
    assert train.tasks is train_tasks and evaluation.tasks is eval_tasks
    for source in (train, evaluation):
        assert isinstance(source, CodeExecutionReward)
        assert source.max_workers == 3 and source.limits.test_timeout_s == 1.5


@pytest.mark.parametrize("reward, parser", [("code", "code"), ("model", "auto")])
def test_make_trainer_hands_the_rule_its_seed_per_rank_and_the_code_parser(tmp_path, monkeypatch, reward, parser):
    """``make_trainer`` builds the termination rule with ``--seed`` + rank (each process its own random cuts) and,
    with ``--reward code``, ``--parser auto`` resolved to the Python-syntax parser (mutation: seed or code flag
    dropped). The trainer and the rollout engine are stand-ins: only what reaches the rule is checked here."""
    import dschat.stages.ppo as ppo_stage
    from dschat.cli.ppo import build_parser
    from dschat.stages.resolve import resolve_algorithm

    built = {}
    monkeypatch.setattr(ppo_stage, "build_termination", lambda name, options: built.update(name=name, options=options))
    monkeypatch.setattr(ppo_stage, "build_rollout_engine", lambda *args: None)
    monkeypatch.setattr(ppo_stage, "PPOTrainer", lambda *args, **kwargs: kwargs)
    args = resolve_algorithm(build_parser().parse_config(
        ["--reward", reward, "--termination", "randomized", "--seed", "11", "--output_dir", str(tmp_path)]))
    trainer_kwargs = ppo_stage.make_trainer(args, engines=SimpleNamespace(actor=None), tokenizer=None,
                                            reward_source=None, world_size=2, rank=1)
    assert built["name"] == "randomized" and built["options"].seed == 12 and built["options"].parser == parser
    assert trainer_kwargs["seed"] == 12
