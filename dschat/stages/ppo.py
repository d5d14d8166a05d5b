"""Step 3: PPO / MA-PPO on parsed flags (the command line, its help and the method: :mod:`dschat.cli.ppo`)."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Tuple

from tqdm.auto import tqdm

from dschat.stages.configs import PPOConfig, RLHFConfig, producer_placement_error
from dschat.stages.resolve import resolve
from dschat.stages.startup import check_files, prompt_sets
from dschat.rlhf.experience import SamplingConfig, rollout_prompts
from dschat.rlhf.macro_action.termination import build_termination
from dschat.rlhf.ppo_trainer import PPOTrainer
from dschat.rlhf.reward_sources import CodeExecutionReward, ModelReward, VerifierReward
from dschat.rlhf.rollout import build_rollout_engine
from dschat.rlhf.rollout.episodes import EpisodeRunner
from dschat.rlhf.rlhf_engine import RLHFEngine, rollout_rows
from dschat.training.checkpoint import save_hf_model
from dschat.core.config import ConfigError, select
from dschat.data import PromptCollator
from dschat.data.registry import answer_task_of, gold_score_of
from dschat.core.distributed import init_distributed, is_main_process
from dschat.training.loop import batches_from, shard_loader, train_loop, training_steps
from dschat.training.metrics import MetricLogger
from dschat.training.output_dir import require_checkpoint_space, require_writable
from dschat.model import load_tokenizer
from dschat.training.run_record import mark_finished, write_run_config
from dschat.core.seeding import seeded_rng, set_random_seed


def sampling_configs(args: RLHFConfig) -> Tuple[SamplingConfig, SamplingConfig]:
    """``(rollout sampling, evaluation sampling)``; ``--eval_temperature 0`` evaluates greedy decodes, unset it
    samples at ``--temperature``."""
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                              top_p=args.top_p)
    if args.eval_temperature is None:
        return sampling, sampling
    if args.eval_temperature == 0:
        return sampling, dataclasses.replace(sampling, do_sample=False)
    return sampling, dataclasses.replace(sampling, temperature=args.eval_temperature)


def make_trainer(args: RLHFConfig, engines, tokenizer, reward_source, world_size: int, rank: int,
                 upcoming=None, env_tasks=None) -> PPOTrainer:
    """The PPO trainer of resolved flags ``args`` on built ``engines``; the randomized rule gets a different seed
    per process, so ranks draw different cuts. ``upcoming(i)``: the prompts of iteration i on, for a rollout
    producer that samples ahead (``--async_rollout``); ``env_tasks``: with ``--env``, the training tasks the prompt
    rows index, each played as an episode (by the producer, with ``--async_rollout``)."""
    options = args.termination_options(seed=args.seed + rank, code=args.reward == "code")
    engine = build_rollout_engine(args, engines.actor, tokenizer, world_size, upcoming, rank, env_tasks)
    return PPOTrainer(engines, tokenizer, reward_source, build_termination(args.termination, options),
                      select(args, PPOConfig), sampling_configs(args)[0], args.per_device_train_batch_size,
                      rollout_rows(args), world_size, rollout_engine=engine, seed=args.seed + rank,
                      episodes=None if args.async_rollout else episode_runner(args, env_tasks, tokenizer, engine))


def episode_runner(args: RLHFConfig, tasks, tokenizer, engine) -> Optional[EpisodeRunner]:
    """With ``--env``, what plays ``tasks`` as episodes on the rollout ``engine``; None otherwise."""
    if args.env is None:
        return None
    return EpisodeRunner(args.env, tasks, tokenizer, engine, args.max_turns, args.max_episode_tokens)


def upcoming_prompts(args: RLHFConfig, prompt_set, collate, rank: int, world_size: int, device):
    """``upcoming(i)``: the rollout prompts of iterations i, i + 1, ... in the training loop's order (with their
    rows' task indices, which ``--env`` episodes play)."""
    def upcoming(start: int):
        for batch in batches_from(prompt_set, collate, args.per_device_generation_batch_size, args.seed, rank,
                                  world_size, start):
            yield rollout_prompts(batch, args.num_samples_per_prompt, device)
    return upcoming


def make_reward_sources(args: RLHFConfig, engines, train_tasks, eval_tasks) -> tuple:
    """``(training reward source, evaluation reward source)``: the reward model for both, program execution
    against the tasks each prompt set was built from (paper §B.5), or the answer verifier against each prompt's
    reference solution."""
    if args.reward == "model":
        source = ModelReward(engines.reward, args.per_device_train_batch_size)
        return source, source
    if args.reward == "env":  # the episodes carry their environment's scores
        return None, None
    if args.reward == "verifier":
        task = answer_task_of(args.data_name)
        return (VerifierReward(train_tasks, task, args.verifier_format_weight),
                VerifierReward(eval_tasks, task, args.verifier_format_weight))
    return (CodeExecutionReward(train_tasks, args.code_workers, args.code_test_timeout),
            CodeExecutionReward(eval_tasks, args.code_workers, args.code_test_timeout))


def evaluate(trainer: PPOTrainer, loader, sampling: SamplingConfig, reward_source, args: RLHFConfig,
             rank: int, episodes=None) -> dict:
    """One held-out evaluation: under ``--eval_seed`` the same sampling noise every time; with the dataset's
    gold score (embedded tasks, reward model scoring) also ``gold``; ``episodes``: the held-out tasks' runner
    (``--env``)."""
    gold = gold_score_of(args.data_name) if args.reward == "model" and not args.data_path else None
    with seeded_rng(None if args.eval_seed is None else args.eval_seed + rank):
        return trainer.evaluate(loader, sampling, reward_source, progress=not args.no_progress_bar and
                                is_main_process(), gold_score=gold, episodes=episodes)


def run(args: RLHFConfig) -> dict:
    """Train with the parsed flags ``args``; returns the final evaluation."""
    args.check_rollout_engine()
    require_writable(args.output_dir)
    rank, world_size, device = init_distributed()
    args = resolve("ppo", args, world_size)  # the cross-flag rules the pre-flight checks (dschat/stages/resolve.py)
    check_files(args)  # and the files it reads (dschat/stages/startup.py)
    set_random_seed(args.seed)
    tokenizer = load_tokenizer(args.actor_model_name_or_path, padding_side="left")
    prompt_set, eval_set, train_tasks, eval_tasks = prompt_sets(args, tokenizer, world_size)
    iterations = training_steps(args, len(prompt_set), args.per_device_generation_batch_size, world_size,
                                batch_flag="--per_device_generation_batch_size")
    engines = RLHFEngine(args, tokenizer, world_size, iterations)
    refusal = producer_placement_error(args, engines.actor.device.type != "cpu", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if refusal:
        raise ConfigError(refusal)
    require_checkpoint_space(args.output_dir, engines.trained)
    os.makedirs(args.output_dir, exist_ok=True)  # start-up passed: the folder now, on every process
    record = write_run_config(args, "ppo", world_size) if rank == 0 else None
    reward_source, eval_reward_source = make_reward_sources(args, engines, train_tasks, eval_tasks)
    collate = PromptCollator.for_tokenizer(tokenizer)
    trainer = make_trainer(args, engines, tokenizer, reward_source, world_size, rank,
                           upcoming_prompts(args, prompt_set, collate, rank, world_size, engines.actor.device),
                           env_tasks=train_tasks)
    eval_episodes = episode_runner(args, eval_tasks, tokenizer, trainer.rollout_engine)
    eval_loader = shard_loader(eval_set, args.per_device_eval_batch_size, collate, rank, world_size)
    metric_logger = MetricLogger(args.output_dir, args.tensorboard_dir, report_to=args.report_to,
                                 run_config=record and record["config"])
    eval_sampling = sampling_configs(args)[1]
    last = {}

    def update(batch: dict) -> dict:
        """One PPO iteration (Algorithm 1); its metrics are already averaged over processes."""
        metrics, last["experience"] = trainer.step(batch)
        return metrics

    def show_samples(step: int) -> None:
        if args.log_samples and is_main_process():
            samples = trainer.sample_table(last["experience"], args.log_samples)
            metric_logger.log_text(step, "samples", samples)
            tqdm.write(samples)

    rule = trainer.termination_rule
    stateful = {"termination": rule} if hasattr(rule, "state_dict") else {}  # a rule with its own generator
    if trainer.shuffles:
        stateful["mini_batch_order"] = trainer
    if hasattr(trainer.rollout_engine, "state_dict"):  # rollouts sampled ahead, with their versions
        stateful["rollout_producer"] = trainer.rollout_engine
    checkpointed = engines.trained
    try:
        final = train_loop(update, prompt_set, collate, args.per_device_generation_batch_size,
                           lambda: evaluate(trainer, eval_loader, eval_sampling, eval_reward_source, args, rank,
                                            eval_episodes), args,
                           rank, world_size, metric_logger, engines=checkpointed, prefix=None, stateful=stateful,
                           summarize=lambda history: history[-1], on_log=show_samples)
    finally:
        trainer.rollout_engine.close()
    for name, engine in checkpointed.items():
        save_hf_model(engine, tokenizer, os.path.join(args.output_dir, name))
    if rank == 0:
        mark_finished(args.output_dir)
    metric_logger.close()
    return final

