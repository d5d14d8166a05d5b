#!/usr/bin/env python
"""Step 3: PPO / MA-PPO (paper §3.2, Algorithm 1). The termination rule is one flag:

    python training/step3_rlhf_finetuning/main.py --actor_model_name_or_path outputs/sft \\
        --critic_model_name_or_path outputs/rm --output_dir outputs/ppo --termination fixed --ngram 5

``--ngram 1`` is vanilla token-level PPO; ``--ngram inf`` one macro per response (n → ∞).

The critic-free baselines of Appendix C.3 share everything else (sampling, reward, KL, logging, checkpoints):
``--algo rloo`` (K = 4 samples per prompt by default), ``--algo grpo``, ``--algo reinforce``; they treat the
whole response as one macro action (§3.2.3) and build no critic.
"""
from __future__ import annotations

import argparse
import os

import torch
from tqdm.auto import tqdm

from dschat.rlhf.baselines import ALGORITHMS, REINFORCE_BASELINES, get_algorithm
from dschat.rlhf.experience import SamplingConfig
from dschat.rlhf.macro_action.termination import TerminationOptions, available_terminations, build_termination
from dschat.rlhf.ppo_config import PPOConfig
from dschat.rlhf.ppo_trainer import PPOTrainer
from dschat.rlhf.reward_sources import CodeExecutionReward, ModelReward
from dschat.rlhf.rlhf_engine import RLHFEngine
from dschat.utils.checkpoint import TrainState, load_resumable, save_hf_model, save_resumable
from dschat.utils.cli import run_cli
from dschat.utils.config import add_data_args, parse_args_with_config
from dschat.utils.data import PromptCollator, PromptDataset
from dschat.utils.distributed import init_distributed, is_main_process
from dschat.utils.loop import batches_per_epoch, make_loader
from dschat.utils.metrics import MetricLogger
from dschat.utils.model import load_tokenizer
from dschat.utils.seeding import set_random_seed
from dschat.utils.stage_data import eval_code_tasks, eval_prompts, train_code_tasks, train_prompts


def ngram_flag(text: str):
    """``--ngram``: a positive integer, or 0 / inf for one macro per response."""
    if str(text).lower() in ("0", "inf", "none"):
        return None
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--ngram {text}: expected a positive integer, 0 or inf")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = parser.add_argument_group("models")
    models.add_argument("--actor_model_name_or_path", default="tiny-gemma", help="SFT checkpoint")
    models.add_argument("--critic_model_name_or_path", default=None,
                        help="critic init (the RM for text; the SFT model for code); default: the reward model")
    models.add_argument("--reward_model_name_or_path", default=None, help="reward model (with --reward model)")
    models.add_argument("--reward", choices=["model", "code"], default="model",
                        help="score source: a reward model, or program execution (code tasks, paper §B.5)")
    models.add_argument("--code_workers", type=int, default=2, help="programs executed in parallel")
    models.add_argument("--code_test_timeout", type=float, default=4.0, help="seconds per test case")
    models.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    for role in ("actor", "critic"):
        models.add_argument(f"--{role}_zero_stage", type=int, choices=[0, 1, 2, 3], default=0)
        models.add_argument(f"--{role}_gradient_checkpointing", action="store_true")
        models.add_argument(f"--{role}_lora_dim", type=int, default=0)
    models.add_argument("--lora_alpha", type=float, default=16.0)
    models.add_argument("--offload", action="store_true")
    models.add_argument("--offload_params", action="store_true")
    models.add_argument("--no_gather_for_generation", action="store_true",
                        help="ZeRO-3: fetch parameters per layer while generating (synced_gpus) instead of once")
    add_data_args(parser)
    data = parser.add_argument_group("sampling (Table 5)")
    data.add_argument("--max_prompt_seq_len", type=int, default=512)
    data.add_argument("--max_answer_seq_len", type=int, default=512)
    data.add_argument("--temperature", type=float, default=0.8)
    data.add_argument("--top_k", type=int, default=50)
    data.add_argument("--top_p", type=float, default=1.0)
    data.add_argument("--eval_temperature", type=float, default=None, help="default: --temperature")
    optim = parser.add_argument_group("optimisation (Table 5)")
    optim.add_argument("--per_device_generation_batch_size", type=int, default=8)
    optim.add_argument("--per_device_training_batch_size", type=int, default=8)
    optim.add_argument("--per_device_eval_batch_size", type=int, default=16)
    optim.add_argument("--actor_learning_rate", type=float, default=1.5e-5)
    optim.add_argument("--critic_learning_rate", type=float, default=1.5e-5)
    optim.add_argument("--weight_decay", type=float, default=0.0)
    optim.add_argument("--lr_scheduler_type", choices=["cosine", "linear", "constant_with_warmup"], default="cosine")
    optim.add_argument("--num_warmup_steps", type=int, default=200)
    optim.add_argument("--gradient_clipping", type=float, default=1.0)
    optim.add_argument("--num_train_epochs", type=int, default=1)
    optim.add_argument("--max_steps", type=int, default=0, help="stop after this many PPO iterations (0 = all)")
    ppo = parser.add_argument_group("PPO constants")
    ppo.add_argument("--kl_coef", type=float, default=0.05, help="β")
    ppo.add_argument("--kl_estimator", choices=["k1", "k2", "k3"], default="k1")
    ppo.add_argument("--reward_clip", type=float, default=5.0)
    ppo.add_argument("--clip_ratio", type=float, default=0.2, help="ε")
    ppo.add_argument("--value_clip", type=float, default=0.2)
    ppo.add_argument("--gamma", type=float, default=1.0)
    ppo.add_argument("--lam", type=float, default=0.95)
    ppo.add_argument("--ppo_epochs", type=int, default=1)
    ppo.add_argument("--whiten_advantages", action="store_true")
    algo = parser.add_argument_group("algorithm (§3.2.3, Appendix C.3)")
    algo.add_argument("--algo", choices=sorted(ALGORITHMS), default="ppo",
                      help="ppo: critic + (macro) GAE; rloo / grpo / reinforce: critic-free, one macro per response")
    algo.add_argument("--num_samples_per_prompt", type=int, default=None,
                      help="K samples per prompt, contiguous (default: 4 for rloo and grpo, 1 otherwise)")
    algo.add_argument("--reinforce_baseline", choices=REINFORCE_BASELINES, default="none",
                      help="--algo reinforce: subtract nothing or the batch's mean return")
    macro = parser.add_argument_group("macro actions (§3.2)")
    macro.add_argument("--termination", default="fixed", choices=available_terminations(),
                       help="termination rule ζ")
    macro.add_argument("--ngram", type=ngram_flag, default=1, help="fixed n-gram length; 1 = vanilla PPO; 0/inf = ∞")
    macro.add_argument("--random_lengths", default="2,3,5,10", help="randomized n-gram length list (§B.4)")
    macro.add_argument("--random_repeat", type=int, default=3)
    macro.add_argument("--parser", choices=["auto", "spacy", "benepar", "code"], default="auto")
    macro.add_argument("--parser_cutoff", type=int, default=5, help="C of the parsing rule")
    macro.add_argument("--value_function", choices=["equal", "unit", "position"], default="equal", help="σ (D.1)")
    macro.add_argument("--macro_reward", choices=["sum", "mean"], default="sum")
    macro.add_argument("--ma_ratio", choices=["token", "macro"], default="token")
    run = parser.add_argument_group("runtime")
    run.add_argument("--output_dir", required=True)
    run.add_argument("--seed", type=int, default=1234)
    run.add_argument("--eval_steps", type=int, default=0, help="evaluate every N iterations (0 = start and end)")
    run.add_argument("--save_steps", type=int, default=0)
    run.add_argument("--resume", action="store_true")
    run.add_argument("--log_steps", type=int, default=1)
    run.add_argument("--log_samples", type=int, default=2, help="decoded responses shown every --log_steps")
    run.add_argument("--tensorboard_dir", default=None)
    run.add_argument("--no_progress_bar", action="store_true")
    run.add_argument("--local_rank", type=int, default=-1)
    run.add_argument("--config", action="append", default=[])
    return parser


def validate_algorithm(args) -> None:
    """Resolve K and check the flags of ``--algo``; critic-free algorithms use one macro per response."""
    algorithm = get_algorithm(args.algo)
    if args.num_samples_per_prompt is None:
        args.num_samples_per_prompt = algorithm.default_samples_per_prompt
    if args.num_samples_per_prompt < algorithm.min_samples_per_prompt:
        raise ValueError(f"--num_samples_per_prompt {args.num_samples_per_prompt}: --algo {args.algo} needs at "
                         f"least {algorithm.min_samples_per_prompt}")
    if args.reinforce_baseline != "none" and args.algo != "reinforce":
        raise ValueError(f"--reinforce_baseline {args.reinforce_baseline} applies to --algo reinforce only")
    if not algorithm.needs_critic:
        if args.termination not in ("fixed", "ngram") or args.ngram not in (1, None):
            raise ValueError(f"--termination/--ngram: --algo {args.algo} treats each response as one macro action "
                             "(n → ∞, §3.2.3); leave them unset")
        args.termination, args.ngram = "fixed", None


def validate(args) -> None:
    validate_algorithm(args)
    rollouts = args.per_device_generation_batch_size * args.num_samples_per_prompt
    if rollouts % args.per_device_training_batch_size:
        raise ValueError(f"--per_device_generation_batch_size {args.per_device_generation_batch_size} x "
                         f"--num_samples_per_prompt {args.num_samples_per_prompt} must be a multiple of "
                         f"--per_device_training_batch_size {args.per_device_training_batch_size}")
    if args.reward == "model" and not (args.reward_model_name_or_path or args.critic_model_name_or_path):
        raise ValueError("--reward model needs --reward_model_name_or_path (or --critic_model_name_or_path)")
    args.reward_model_name_or_path = args.reward_model_name_or_path or args.critic_model_name_or_path
    args.critic_model_name_or_path = args.critic_model_name_or_path or (
        args.reward_model_name_or_path if args.reward == "model" else args.actor_model_name_or_path)


def termination_options(args, rank: int) -> TerminationOptions:
    """Rule options; the randomized rule gets a different seed per process so ranks draw different cuts, and
    ``--parser auto`` parses Python (statement-level macros) when the responses are programs."""
    parser = "code" if args.parser == "auto" and args.reward == "code" else args.parser
    return TerminationOptions(ngram=args.ngram, lengths=tuple(int(x) for x in args.random_lengths.split(",")),
                              repeat=args.random_repeat, seed=args.seed + rank, parser=parser,
                              parser_cutoff=args.parser_cutoff)


def ppo_config(args) -> PPOConfig:
    return PPOConfig(kl_coef=args.kl_coef, kl_estimator=args.kl_estimator, reward_clip=args.reward_clip,
                     clip_ratio=args.clip_ratio, value_clip=args.value_clip, gamma=args.gamma, lam=args.lam,
                     ppo_epochs=args.ppo_epochs, whiten_advantages=args.whiten_advantages,
                     sigma=args.value_function, macro_reward=args.macro_reward, ma_ratio=args.ma_ratio,
                     termination=args.termination, ngram=args.ngram, algo=args.algo,
                     num_samples_per_prompt=args.num_samples_per_prompt, reinforce_baseline=args.reinforce_baseline)


def load_prompts(args) -> tuple:
    """``(train prompts, eval prompts, train tasks, eval tasks)``; the tasks (for ``--reward code``) are None
    when a reward model scores the responses."""
    if args.reward == "code":
        train_tasks, eval_tasks = train_code_tasks(args), eval_code_tasks(args)
        return [t.prompt for t in train_tasks], [t.prompt for t in eval_tasks], train_tasks, eval_tasks
    return train_prompts(args), eval_prompts(args), None, None


def make_reward_sources(args, engines, train_tasks, eval_tasks) -> tuple:
    """``(training reward source, evaluation reward source)``: the reward model for both, or program execution
    against the tasks each prompt set was built from (paper §B.5)."""
    if args.reward == "model":
        source = ModelReward(engines.reward)
        return source, source
    return (CodeExecutionReward(train_tasks, args.code_workers, args.code_test_timeout),
            CodeExecutionReward(eval_tasks, args.code_workers, args.code_test_timeout))


def main(argv=None) -> dict:
    args = parse_args_with_config(build_parser(), argv)
    validate(args)
    rank, world_size, device = init_distributed()
    set_random_seed(args.seed)
    tokenizer = load_tokenizer(args.actor_model_name_or_path, padding_side="left")
    train_texts, eval_texts, train_tasks, eval_tasks = load_prompts(args)
    prompt_set = PromptDataset(train_texts, tokenizer, args.max_prompt_seq_len)
    eval_set = PromptDataset(eval_texts, tokenizer, args.max_prompt_seq_len)
    if len(eval_set) == 0:
        raise ValueError(f"no evaluation prompt fits --max_prompt_seq_len {args.max_prompt_seq_len} "
                         f"({len(eval_texts)} prompts, {eval_set.num_skipped} too long)")
    per_epoch = batches_per_epoch(len(prompt_set), world_size, args.per_device_generation_batch_size)
    if per_epoch == 0:
        raise ValueError(f"{len(prompt_set)} prompts are fewer than one generation batch")
    total_steps = per_epoch * args.num_train_epochs
    total_steps = min(total_steps, args.max_steps) if args.max_steps else total_steps
    engines = RLHFEngine(args, tokenizer, world_size, total_steps)
    sampling = SamplingConfig(max_new_tokens=args.max_answer_seq_len, temperature=args.temperature,
                              top_k=args.top_k, top_p=args.top_p)
    eval_sampling = SamplingConfig(max_new_tokens=args.max_answer_seq_len,
                                   temperature=args.eval_temperature or args.temperature,
                                   top_k=args.top_k, top_p=args.top_p)
    reward_source, eval_reward_source = make_reward_sources(args, engines, train_tasks, eval_tasks)
    trainer = PPOTrainer(engines, tokenizer, reward_source,
                         build_termination(args.termination, termination_options(args, rank)), ppo_config(args),
                         sampling, args.per_device_training_batch_size, world_size,
                         gather_for_generation=not args.no_gather_for_generation)
    collate = PromptCollator.for_tokenizer(tokenizer)
    eval_loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(eval_set, range(rank, len(eval_set), world_size)),
        batch_size=args.per_device_eval_batch_size, collate_fn=collate)
    metric_logger = MetricLogger(args.output_dir, args.tensorboard_dir)

    def evaluate() -> dict:
        return trainer.evaluate(eval_loader, eval_sampling, eval_reward_source,
                                progress=not args.no_progress_bar and is_main_process())

    state = TrainState()
    if args.resume:
        loaded = load_resumable(engines.actor, os.path.join(args.output_dir, "actor"))
        if loaded is not None:
            state = loaded[0]
            if engines.critic is not None:
                load_resumable(engines.critic, os.path.join(args.output_dir, "critic"))
    if state.global_step == 0:
        metric_logger.log(0, {f"eval/{k}": v for k, v in evaluate().items()})
    progress = tqdm(total=total_steps, initial=state.global_step, desc="ppo",
                    disable=args.no_progress_bar or not is_main_process())
    while state.global_step < total_steps:
        loader = make_loader(prompt_set, collate, args.per_device_generation_batch_size, args.seed, state.epoch,
                             rank, world_size, skip_batches=state.batch_in_epoch)
        for batch in loader:
            metrics, experience = trainer.step(batch)
            state.batch_in_epoch += 1
            state.global_step += 1
            progress.update(1)
            if state.global_step % args.log_steps == 0:
                metric_logger.log(state.global_step, metrics)
                if args.log_samples and is_main_process():
                    samples = trainer.sample_table(experience, args.log_samples)
                    metric_logger.log_text(state.global_step, "samples", samples)
                    tqdm.write(samples)
            if args.eval_steps and state.global_step % args.eval_steps == 0 and state.global_step < total_steps:
                metric_logger.log(state.global_step, {f"eval/{k}": v for k, v in evaluate().items()})
            if args.save_steps and state.global_step % args.save_steps == 0 and state.global_step < total_steps:
                save_resumable(engines.actor, os.path.join(args.output_dir, "actor"), state)
                if engines.critic is not None:
                    save_resumable(engines.critic, os.path.join(args.output_dir, "critic"), state)
            if state.global_step >= total_steps:
                break
        else:
            state.epoch += 1
            state.batch_in_epoch = 0
    progress.close()
    final = evaluate()
    metric_logger.log(state.global_step, {f"eval/{k}": v for k, v in final.items()})
    save_hf_model(engines.actor, tokenizer, os.path.join(args.output_dir, "actor"))
    if engines.critic is not None:
        save_hf_model(engines.critic, tokenizer, os.path.join(args.output_dir, "critic"))
    metric_logger.close()
    return final


if __name__ == "__main__":
    run_cli(main)
