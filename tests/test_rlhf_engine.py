"""The four models of step 3 get their own DeepSpeed settings: the frozen reward model its own ZeRO stage."""
from __future__ import annotations

from conftest import one_line_error
from dschat.cli.ppo import build_parser, main as ppo_main, resolve_algorithm, resolve_batches, resolve_models
from dschat.rlhf.rlhf_engine import RLHFEngine
from dschat.utils.distributed import init_distributed


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
