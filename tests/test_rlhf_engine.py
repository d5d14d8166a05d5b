"""Step 3's models and sampling: the frozen reward model has its own ZeRO stage; --eval_temperature 0 is greedy."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from conftest import one_line_error
from dschat.cli.ppo import build_parser, main as ppo_main
from dschat.stages.resolve import resolve_algorithm, resolve_batches, resolve_models
from dschat.stages.ppo import sampling_configs
from dschat.rlhf.rollout.hf import generate
from dschat.rlhf.rlhf_engine import RLHFEngine
from dschat.core.distributed import init_distributed
from dschat.model import load_causal_lm


def engines(tokenizer, flags):
    args = build_parser().parse_config(["--output_dir", "unused", "--critic_model_name_or_path", "tiny-gemma",
                                        "--per_device_generation_batch_size", "4",
                                        "--per_device_train_batch_size", "4", *flags])
    _, world_size, _ = init_distributed()
    return RLHFEngine(resolve_batches(resolve_models(resolve_algorithm(args)), world_size), tokenizer,
                      world_size, 10)


def test_reward_model_has_its_own_zero_stage_defaulting_to_the_critics(tokenizer):
    own = engines(tokenizer, ["--critic_zero_stage", "0", "--reward_zero_stage", "3"])
    assert own.critic.zero_optimization_stage() == 0
    assert own.reward.zero_optimization_stage() == 3
    assert own.reward.config["zero_optimization"]["stage"] == 3
    default = engines(tokenizer, ["--critic_zero_stage", "3"])
    assert default.reward.zero_optimization_stage() == 3


def test_reward_offload_needs_zero3(capsys):
    error = one_line_error(ppo_main, ["--output_dir", "unused", "--critic_model_name_or_path", "tiny-gemma",
                                      "--reward_offload_params"], capsys)
    assert "--reward_offload_params" in error and "--reward_zero_stage 3" in error


def test_eval_temperature_zero_decodes_greedily(tokenizer):
    """``--eval_temperature 0`` parses, and the evaluation sampling config then generates the argmax decode
    (the same under any seed); unset, evaluation samples at ``--temperature``."""
    def parse(flags):
        return build_parser().parse_config(["--output_dir", "unused", "--temperature", "0.7", *flags])

    rollout, evaluation = sampling_configs(parse(["--eval_temperature", "0", "--max_new_tokens", "8"]))
    assert rollout.do_sample and rollout.temperature == 0.7 and evaluation.do_sample is False
    default = sampling_configs(parse([]))[1]
    assert default.do_sample and default.temperature == 0.7
    assert sampling_configs(parse(["--eval_temperature", "1.3"]))[1].temperature == 1.3

    model = load_causal_lm("tiny-gemma", tokenizer, seed=7).eval()
    model.generation_config.do_sample = True  # as many hub models ship it: greedy must come from our config
    engine = SimpleNamespace(module=model, zero_optimization_stage=lambda: 0)
    prompt = torch.tensor([[tokenizer.bos_token_id, *tokenizer("Write a review of the lamp.",
                                                               add_special_tokens=False)["input_ids"]]])
    decodes = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        decodes.append(generate(engine, prompt, torch.ones_like(prompt), evaluation, tokenizer.pad_token_id,
                                tokenizer.eos_token_id))
    assert torch.equal(decodes[0], decodes[1])
    ids = prompt
    with torch.no_grad():
        for _ in range(8):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    generated, expected = decodes[0][0, prompt.shape[1]:], ids[0, prompt.shape[1]:]
    stop = (expected == tokenizer.eos_token_id).nonzero()
    length = int(stop[0]) + 1 if len(stop) else len(expected)
    assert torch.equal(generated[:length], expected[:length])


def test_each_trained_model_gets_its_own_engine_flags():
    """``--actor_*`` reach the actor's engine settings and ``--critic_*`` the critic's, none crossing over."""
    from dschat.rlhf.rlhf_engine import actor_settings, critic_settings, role_config

    args = build_parser().parse_config(["--output_dir", "unused", "--critic_model_name_or_path", "tiny-gemma",
                                        "--actor_zero_stage", "2", "--critic_zero_stage",
                                        "3", "--actor_learning_rate", "1e-4", "--critic_learning_rate", "2e-4",
                                        "--actor_gradient_checkpointing", "--critic_lora_dim", "8"])
    args = resolve_batches(resolve_models(resolve_algorithm(args)), 1)
    actor, critic = (role_config(args, settings(args), 10) for settings in (actor_settings, critic_settings))
    assert (actor.zero_stage, actor.gradient_checkpointing, actor.lora_dim, actor.learning_rate) == (2, True, 0, 1e-4)
    assert (critic.zero_stage, critic.gradient_checkpointing, critic.lora_dim, critic.learning_rate) == \
        (3, False, 8, 2e-4)


def test_role_config_carries_every_engine_flag_at_a_non_default_value():
    """Each field of a trained model's engine config, from step 3's flags set away from their defaults, against
    values worked out by hand: 4 prompts x 2 samples = 8 rollout rows, mini-batches of 4 in micro-batches of 2
    (2 accumulation steps), 3 passes -> 3 x 8 / 4 = 6 optimizer steps per iteration, so a warmup of 2 iterations
    is 12 optimizer steps. (``--lora_dropout`` is refused in step 3: its models run without dropout.)"""
    from dschat.rlhf.rlhf_engine import actor_settings, critic_settings, role_config

    flags = ["--output_dir", "unused", "--critic_model_name_or_path", "tiny-gemma", "--actor_zero_stage", "3",
             "--critic_zero_stage", "3", "--dtype", "bf16", "--offload", "--offload_params",
             "--actor_lora_dim", "4", "--lora_alpha", "7",
             "--per_device_generation_batch_size", "4", "--num_samples_per_prompt", "2",
             "--per_device_train_batch_size", "2", "--ppo_mini_batch_size", "4", "--ppo_epochs", "3",
             "--actor_learning_rate", "3e-5", "--critic_learning_rate", "4e-5", "--weight_decay", "0.03",
             "--adam_beta1", "0.8", "--adam_beta2", "0.9", "--lr_scheduler_type", "linear",
             "--gradient_clipping", "0.7", "--warmup_steps", "2"]
    args = resolve_batches(resolve_models(resolve_algorithm(build_parser().parse_config(flags))), 1)
    actor, critic = (role_config(args, settings(args), 10) for settings in (actor_settings, critic_settings))
    shared = dict(zero_stage=3, dtype="bf16", offload=True, offload_params=True, lora_alpha=7.0, lora_dropout=0.0,
                  micro_batch_size=2, gradient_accumulation_steps=2, weight_decay=0.03, adam_betas=(0.8, 0.9),
                  lr_scheduler_type="linear", warmup_steps=12, gradient_clipping=0.7, gradient_checkpointing=False)
    for config, expected in ((actor, dict(shared, lora_dim=4, learning_rate=3e-5)),
                             (critic, dict(shared, lora_dim=0, learning_rate=4e-5))):
        assert vars(config) == expected
        assert {k: type(v) for k, v in vars(config).items()} == {k: type(v) for k, v in expected.items()}  # 2, not 2.0
