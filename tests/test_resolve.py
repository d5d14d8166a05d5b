"""The cross-flag rules in one torch-free resolver (dschat/stages/resolve.py): the pre-flight (--dry_run) refuses
every combination the run refuses, in the run's own line, before anything is created; a rule without a case
here fails the coverage test, so a new rule comes with its refusal."""
import importlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Tuple

import pytest

from conftest import ROOT, one_line_error
from dschat.stages import resolve as resolver


@dataclass(frozen=True)
class Case:
    rule: str
    stage: str
    flags: Tuple[str, ...]
    message: str
    world_size: int = 1


REWARD = ("--reward_model_name_or_path", "tiny-gemma")
CASES = [
    Case("resolve_models", "ppo", (), "--reward model needs --reward_model_name_or_path (or "
         "--critic_model_name_or_path)"),
    Case("resolve_models", "ppo", REWARD + ("--reward_offload_params",), "--reward_offload_params needs the reward "
         "model under ZeRO-3 (its stage is 0; add --reward_zero_stage 3)"),
    Case("resolve_zero", "ppo", REWARD + ("--actor_lora_dim", "8", "--actor_zero_stage", "3"),
         "--actor_lora_dim with --actor_zero_stage 3 is not supported; use ZeRO stage 0-2 with LoRA"),
    Case("resolve_zero", "ppo", REWARD + ("--critic_lora_dim", "8", "--critic_zero_stage", "3"),
         "--critic_lora_dim with --critic_zero_stage 3 is not supported; use ZeRO stage 0-2 with LoRA"),
    Case("resolve_zero", "ppo", REWARD + ("--offload_params",), "--offload_params needs --actor_zero_stage 3 (it is 0)"),
    Case("resolve_zero", "ppo", REWARD + ("--offload_params", "--actor_zero_stage", "3"),
         "--offload_params needs --critic_zero_stage 3 (it is 0)"),
    *[Case("resolve_zero", stage, ("--lora_dim", "8", "--zero_stage", "3"),
           "--lora_dim with --zero_stage 3 is not supported; use ZeRO stage 0-2 with LoRA") for stage in ("sft", "rm")],
    Case("resolve_zero", "dpo", ("--offload_params", "--zero_stage", "2"), "--offload_params needs --zero_stage 3 (it is 2)"),
    Case("resolve_algorithm", "ppo", REWARD + ("--algo", "rloo", "--num_samples_per_prompt", "1"),
         "--num_samples_per_prompt 1: --algo rloo needs at least 2"),
    Case("resolve_algorithm", "ppo", REWARD + ("--reinforce_baseline", "batch_mean"),
         "--reinforce_baseline batch_mean applies to --algo reinforce only"),
    Case("resolve_objective", "ppo", REWARD + ("--scale_rewards", "none"),
         "--scale_rewards: a critic-free --algo's knob (group baselines); --algo ppo estimates advantages with a "
         "critic (--whiten_advantages scales them)"),
    Case("resolve_engine", "ppo", REWARD + ("--rollout_engine", "vllm", "--vllm_tensor_parallel_size", "3"),
         "--vllm_tensor_parallel_size 3 must divide the 1 processes (each engine spans that many of them)"),
    Case("resolve_engine", "ppo", REWARD + ("--rollout_gpus", "1"),
         "--rollout_gpus: the asynchronous producer's setting; it needs --async_rollout >= 1"),
    Case("resolve_engine", "ppo", REWARD + ("--partial_rollout",),
         "--partial_rollout: the asynchronous producer's setting; it needs --async_rollout >= 1"),
    Case("resolve_engine", "ppo", REWARD + ("--async_rollout", "1", "--partial_rollout_chunk", "8"),
         "--partial_rollout_chunk 8: needs --partial_rollout"),
    Case("resolve_engine", "ppo", REWARD + ("--async_rollout", "1", "--rollout_gpus", "2", "2"),
         "--rollout_gpus 2 2: a GPU id is listed twice"),
    Case("resolve_engine", "ppo", REWARD + ("--async_rollout", "1", "--rollout_gpus", "2", "--rollout_transport",
                                            "queue"),
         "--rollout_transport queue carries host tensors; a producer on --rollout_gpus 2 takes collective (NCCL)"),
    Case("resolve_engine", "ppo", REWARD + ("--async_rollout", "1", "--rollout_gpus", "2", "3", "4"),
         "--rollout_gpus 2 3 4: 3 GPU(s) must divide the 2 processes on this node (each GPU holds the producers of "
         "as many processes)", world_size=2),
    Case("resolve_engine", "ppo", REWARD + ("--async_rollout", "1", "--rollout_gpus", "2", "3", "--rollout_engine",
                                            "vllm", "--vllm_tensor_parallel_size", "2"),
         "--vllm_tensor_parallel_size 2: a producer's engine runs on one GPU (tensor parallelism across a "
         "producer's GPUs is not built)", world_size=2),
    Case("resolve_engine", "ppo", REWARD + ("--async_rollout", "1", "--rollout_engine", "vllm",
                                            "--vllm_tensor_parallel_size", "2"),
         "--vllm_tensor_parallel_size 2: a producer on CPU runs one vLLM engine per process (give it GPUs with "
         "--rollout_gpus)"),
    Case("resolve_environment", "ppo", ("--reward", "env"),
         "--reward env: the score of an --env environment; give --env NAME"),
    Case("resolve_environment", "ppo", ("--env", "consistency", "--reward", "code"),
         "--env consistency scores its episodes itself; drop --reward code"),
    Case("resolve_environment", "ppo", ("--env", "consistency", "--reward", "verifier"),
         "--env consistency scores its episodes itself; drop --reward verifier"),
    Case("resolve_environment", "ppo", ("--env", "consistency", "--async_rollout", "1", "--partial_rollout"),
         "--partial_rollout: an --env episode is played whole by one policy version (chunked sampling of episodes "
         "is not built)"),
    Case("resolve_environment", "ppo", ("--env", "consistency", "--algo", "grpo", "--filter_groups"),
         "--filter_groups: --env episodes are played once (resampled groups of episodes are not built)"),
    Case("resolve_batches", "ppo", REWARD + ("--global_batch_size", "8"),
         "--global_batch_size 8 cannot be split over 3 processes", world_size=3),
    Case("resolve_batches", "ppo", REWARD + ("--per_device_generation_batch_size", "6", "--ppo_mini_batch_size", "4"),
         "--ppo_mini_batch_size 4 must divide the 6 rollout rows per process"),
    Case("resolve_batches", "ppo", REWARD + ("--per_device_generation_batch_size", "6",
                                             "--per_device_train_batch_size", "4"),
         "--per_device_generation_batch_size 6 x --num_samples_per_prompt 1 must be a multiple of "
         "--per_device_train_batch_size 4"),
    *[Case("resolve_supervised_batches", stage, ("--global_batch_size", "16", "--per_device_train_batch_size", "4",
                                                 "--gradient_accumulation_steps", "2"),
           "--global_batch_size 16 != --per_device_train_batch_size 4 x --gradient_accumulation_steps 2 x 1 processes")
      for stage in ("sft", "rm", "dpo")],
    Case("resolve_supervised_batches", "sft", ("--global_batch_size", "8"),
         "--global_batch_size 8 cannot be split over 3 processes", world_size=3),
    Case("resolve_objective", "ppo", REWARD + ("--filter_groups",),
         "--filter_groups: a critic-free --algo's knob (group baselines)"),
    Case("resolve_objective", "ppo", REWARD + ("--algo", "reinforce", "--filter_groups"),
         "--filter_groups needs groups: --num_samples_per_prompt 1 must be >= 2"),
    Case("resolve_objective", "ppo", REWARD + ("--algo", "grpo", "--filter_groups", "--async_rollout", "1"),
         "--filter_groups samples again within an iteration; the asynchronous producer (--async_rollout) samples "
         "ahead: use one of them"),
    Case("resolve_objective", "ppo", REWARD + ("--overlong_buffer_len", "512"),
         "--overlong_buffer_len 512 must be below --max_new_tokens 512"),
    Case("resolve_objective", "ppo", REWARD + ("--rollout_is_mode", "mask"),
         "--rollout_is_mode: a setting of the rollout correction; it needs --rollout_is token | macro | sequence"),
    Case("resolve_objective", "ppo", REWARD + ("--rollout_engine", "vllm", "--rollout_is", "token",
                                               "--rollout_is_mode", "mask", "--rollout_is_low", "4"),
         "--rollout_is_low 4 must be below --rollout_is_cap 3"),
]


def case_id(case: Case) -> str:
    return f"{case.stage}-{case.rule}-{'_'.join(flag.strip('-') for flag in case.flags[-4:])}"


def test_every_rule_has_a_refusal_case():
    """Each rule of every stage is exercised below: the two checks cover the resolver, not a hand-picked part."""
    rules = {rule.__name__ for stage_rules in resolver.RULES.values() for rule in stage_rules}
    assert rules == {case.rule for case in CASES}
    for case in CASES:
        assert getattr(resolver, case.rule) in resolver.RULES[case.stage]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_dry_run_refuses_what_the_run_refuses_in_its_words_creating_nothing(case, tmp_path, monkeypatch, capsys):
    """The pre-flight's line is the run's: ``stages.<stage>.run`` on the same flags (its process group stubbed,
    nothing else) stops on the same ConfigError, and leaves no folder behind."""
    monkeypatch.setenv("WORLD_SIZE", str(case.world_size))
    out = tmp_path / "out"
    argv = ["--output_dir", str(out), *case.flags]
    cli = importlib.import_module(f"dschat.cli.{case.stage}")
    preflight_line = one_line_error(cli.main, [*argv, "--dry_run"], capsys)
    assert case.message in preflight_line
    assert not out.exists() and "pre-flight of" not in capsys.readouterr().out

    stage = importlib.import_module(f"dschat.stages.{case.stage}")
    home = stage if case.stage == "ppo" else importlib.import_module("dschat.stages.supervised")
    monkeypatch.setattr(home, "init_distributed", lambda: (0, case.world_size, "cpu"))
    if case.stage == "ppo":
        monkeypatch.setattr(stage.RLHFConfig, "check_rollout_engine", lambda self: None)  # vLLM may be absent
    with pytest.raises(ValueError) as refused:
        stage.run(cli.build_parser().parse_config(argv))
    assert f"error: {refused.value}" == preflight_line
    assert not out.exists()  # the refused run created no folder (its run_config.yaml waits for start-up to pass)


def test_the_three_first_contact_cases_answer_before_torch_is_imported(tmp_path):
    """``python -m dschat.cli.ppo ... --dry_run`` on the issue's three cases (and the run itself on the first): the
    run's line, exit 2, no folder, and neither torch nor DeepSpeed imported to say it."""
    for case, dry_run in ((CASES[0], "--dry_run"), (CASES[2], "--dry_run"), (CASES[5], "--dry_run"),
                          (CASES[0], "--seed=1")):  # without --dry_run: refused before the run's imports too
        code = ("import sys\nfrom dschat.cli import ppo\nfrom dschat.core.entrypoint import run_cli\n"
                "try:\n    run_cli(lambda: ppo.main(sys.argv[1:]))\nfinally:\n"
                "    print(sorted({'torch', 'deepspeed'} & set(sys.modules)))\n")
        result = subprocess.run([sys.executable, "-c", code, "--data_name", "synthetic", "--output_dir",
                                 str(tmp_path / "X"), *case.flags, dry_run], capture_output=True, text=True,
                                cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT, "DS_ACCELERATOR": "cpu"})
        assert result.returncode == 2 and result.stdout == "[]\n", (result.stdout, result.stderr)
        assert result.stderr == f"error: {case.message}\n"
        assert not (tmp_path / "X").exists()


def test_resolving_twice_changes_nothing():
    """The CLI resolves before the heavy imports and the run again after its process group starts: the same
    flags, so the run trains with exactly what the pre-flight checked."""
    from dschat.cli import stage_parser

    for stage, flags in (("ppo", [*REWARD, "--global_batch_size", "12", "--algo", "rloo"]),
                         ("sft", ["--global_batch_size", "12", "--per_device_train_batch_size", "5"])):
        once = resolver.resolve(stage, stage_parser(stage).parse_config(["--output_dir", "o", *flags]), 2)
        assert resolver.resolve(stage, once, 2) == once


def test_partial_rollouts_are_accepted_on_either_engine():
    """--partial_rollout with a producer runs on the hf engine (chunks of generate) and on vLLM (requests resumed
    with the tokens so far as prompt): neither is refused."""
    from dschat.cli import stage_parser

    for engine in ("hf", "vllm"):
        flags = [*REWARD, "--async_rollout", "1", "--partial_rollout", "--partial_rollout_chunk", "4",
                 "--rollout_engine", engine]
        resolved = resolver.resolve("ppo", stage_parser("ppo").parse_config(["--output_dir", "o", *flags]), 1)
        assert resolved.partial_rollout and resolved.partial_rollout_chunk == 4 and resolved.rollout_engine == engine


def test_a_memory_plan_error_is_missing_never_ok(monkeypatch):
    from dschat.cli import plan, preflight
    from dschat.core.config import ConfigError

    def refuse(*args, **kwargs):
        raise ConfigError("model nowhere: not a local checkpoint")

    monkeypatch.setattr(plan, "plan_for_args", refuse)
    made, check = preflight.make_plan("ppo", None, 1)
    assert made is None and str(check) == "MISSING memory: model nowhere: not a local checkpoint"
