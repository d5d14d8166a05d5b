"""Shared fixtures and helpers (test modules import these from here, never from each other): CPU DeepSpeed,
the shipped tokenizer, metrics readers, the stage flags of the tiny runs, a hand-built word-level tokenizer,
APPS fixture rows, a two-process launcher, and a step-3 trainer on tiny Gemmas with padded rollouts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def tokenizer():
    from dschat.model import load_tokenizer

    return load_tokenizer("tiny-gemma")


VLLM_TESTS = "test_rollout_vllm.py"
"""The module whose tests build in-process vLLM engines: they run after every other test of the session, because an
engine changes the process's torch.distributed state in ways a later DeepSpeed run in the same process cannot
use (a training job runs one engine for its whole life and never meets this)."""


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name == VLLM_TESTS)


def save_tied_llama(out, hidden_size: int = 64, chat_template=None) -> str:
    """A tiny Llama with tied embeddings saved in ``out`` with SmolLM2-135M-Instruct's conventions at toy size: the
    shipped tokenizer with its pad set to its eos (and ``chat_template``, if given); seed 0."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from dschat.model.loading import ASSET_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(ASSET_TOKENIZER)
    tokenizer.pad_token = tokenizer.eos_token
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def read_metrics(run_dir: str, timings: bool = False) -> list:
    """The records of a run's ``metrics.jsonl``; without ``timings`` the ``timing/*`` keys (wall-clock seconds,
    different in every run of the same computation) are left out."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        records = [json.loads(line) for line in handle]
    return records if timings else [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]


def last_value(records: list, key: str) -> float:
    return [r[key] for r in records if key in r][-1]


def one_line_error(main, argv, capsys) -> str:
    """Run ``main(argv)`` through the CLI wrapper; it must exit 2 with exactly one ``error: ...`` line (returned)."""
    from dschat.core.entrypoint import run_cli

    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


SFT_FLAGS = ["--model_name_or_path", "tiny-gemma", "--max_seq_len", "64", "--per_device_train_batch_size", "16",
             "--learning_rate", "2e-3", "--warmup_ratio", "0.05", "--max_eval_samples", "64",
             "--no_progress_bar", "--log_steps", "1"]
"""Step 1 on the embedded synthetic default with the tiny Gemma (add --output_dir and --max_steps)."""


def torchrun(script: str, flags: list, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run a stage entry point in two CPU processes (gloo); fails the test on a non-zero exit."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
               os.path.join(ROOT, script), *flags]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


WORD_VOCAB = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "q1": 4, "q2": 5, "r1": 6, "r2": 7, "x": 8}
PAD, EOS, BOS = 0, 1, 2


def word_tokenizer(bos=True, pad=True):
    """A whitespace word-level tokenizer over ``WORD_VOCAB`` with known ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(WORD_VOCAB, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    specials = {"eos_token": "<eos>", "unk_token": "<unk>"}
    if bos:
        specials["bos_token"] = "<bos>"
    if pad:
        specials["pad_token"] = "<pad>"
    return PreTrainedTokenizerFast(tokenizer_object=backend, **specials)


APPS_FIXTURES = os.path.join(ROOT, "tests", "fixtures", "apps", "apps_problems.jsonl")


def apps_rows() -> dict:
    """The hand-written ``codeparrot/apps`` fixture rows by problem id."""
    with open(APPS_FIXTURES, encoding="utf-8") as fixture:
        return {row["problem_id"]: row for row in map(json.loads, fixture)}


def apps_task(row: dict):
    """A ``codeparrot/apps`` row as a CodeTask (what the APPS adapter produces)."""
    from dschat.rewards import apps_test_cases
    from dschat.data.schema import CodeTask

    task_id = str(row["problem_id"])
    inputs, outputs, fn_name = apps_test_cases(task_id, row["input_output"])
    return CodeTask(task_id=task_id, prompt=row["question"], question=row["question"],
                    starter_code=row["starter_code"], fn_name=fn_name, inputs=inputs, outputs=outputs,
                    difficulty=row["difficulty"], solutions=json.loads(row["solutions"]))


def build_trainer(tmp_path, extra=(), engines=None):
    """A trainer on tiny-gemma built from step-3 flags as the stage builds it (random weights, seed 1234)."""
    from dschat.cli.ppo import build_parser
    from dschat.stages import ppo
    from dschat.stages.resolve import resolve
    from dschat.rlhf.reward_sources import ModelReward
    from dschat.rlhf.rlhf_engine import RLHFEngine
    from dschat.core.distributed import init_distributed
    from dschat.model import load_tokenizer

    init_distributed()
    flags = ["--actor_model_name_or_path", "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
             "--output_dir", str(tmp_path), "--max_prompt_seq_len", "16", "--max_new_tokens", "8",
             "--per_device_generation_batch_size", "8", "--per_device_train_batch_size", "4",
             "--warmup_steps", "0", "--actor_learning_rate", "1e-3", "--critic_learning_rate", "1e-3",
             "--temperature", "1.0", *extra]
    args = resolve("ppo", build_parser().parse_config(flags), 1)
    tokenizer = load_tokenizer("tiny-gemma", padding_side="left")
    if engines is None:
        torch.manual_seed(args.seed)
        engines = RLHFEngine(args, tokenizer, 1, num_iterations=10)
    return ppo.make_trainer(args, engines, tokenizer, ModelReward(engines.reward, args.per_device_train_batch_size),
                            1, 0)


def padded_rollout(tokenizer, prompt_side: str, generator: torch.Generator):
    """8 rollouts ``[prompt | response]`` padded far beyond their content: prompts of 2-7 tokens in 9 columns
    (so at least two columns are padding in every row), responses of 1-9 tokens ending in EOS in 20 columns."""
    from dschat.rlhf.experience import rollout_masks

    prompt_lengths = [2, 7, 4, 3, 6, 5, 2, 4]
    response_lengths = [9, 1, 4, 6, 2, 9, 3, 5]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    vocab = [t for t in range(10, 200) if t not in (pad, eos)]

    def tokens(n):
        return torch.tensor(vocab)[torch.randint(len(vocab), (n,), generator=generator)]

    prompts = torch.full((8, 9), pad)
    prompt_mask = torch.zeros(8, 9, dtype=torch.long)
    responses = torch.full((8, 20), pad)
    for row, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        columns = slice(9 - p, 9) if prompt_side == "left" else slice(0, p)
        prompts[row, columns] = tokens(p)
        prompt_mask[row, columns] = 1
        responses[row, :r - 1] = tokens(r - 1)
        responses[row, r - 1] = eos
    seq = torch.cat([prompts, responses], dim=1)
    attention_mask, action_mask = rollout_masks(seq, prompt_mask, eos)
    return seq, attention_mask, action_mask


TINY_PPO = ["--actor_model_name_or_path", "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
            "--max_prompt_seq_len", "32", "--max_answer_seq_len", "8", "--per_device_generation_batch_size", "4",
            "--per_device_training_batch_size", "4", "--max_eval_samples", "4", "--num_warmup_steps", "0",
            "--no_progress_bar", "--log_samples", "0", "--actor_learning_rate", "1e-3"]
"""Step 3 on the demo models (tiny Gemma actor and critic, untrained) and the embedded task; add --output_dir and
--max_steps. One checkpoint of its actor and critic is about 24 MB."""


def interrupt_then_resume(main, flags: list, out, monkeypatch, at: int = 4) -> None:
    """Run step 3 (``main``) with ``flags`` into ``out``, interrupted by a KeyboardInterrupt as its ``at``-th PPO
    iteration starts, then again with ``--resume``."""
    from dschat.rlhf.ppo_trainer import PPOTrainer

    real_step, calls = PPOTrainer.step, []

    def step_then_die(self, batch):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt("simulated interruption")
        return real_step(self, batch)

    monkeypatch.setattr(PPOTrainer, "step", step_then_die)
    with pytest.raises(KeyboardInterrupt):
        main(flags + ["--output_dir", str(out)])
    monkeypatch.setattr(PPOTrainer, "step", real_step)
    main(flags + ["--output_dir", str(out), "--resume"])


def record_ppo_steps(monkeypatch) -> list:
    """The experience of every PPO iteration the test then runs, in order (``PPOTrainer.step`` wrapped)."""
    from dschat.rlhf.ppo_trainer import PPOTrainer

    real_step, experiences = PPOTrainer.step, []

    def recording_step(self, batch):
        metrics, experience = real_step(self, batch)
        experiences.append(experience)
        return metrics, experience

    monkeypatch.setattr(PPOTrainer, "step", recording_step)
    return experiences


def child_env() -> dict:
    """The environment of a stage run in a child process: CPU, one thread, this checkout, and none of the
    rendezvous variables an in-process test's ``init_distributed`` left behind (its port is taken)."""
    rendezvous = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    return {**{k: v for k, v in os.environ.items() if k not in rendezvous}, "DS_ACCELERATOR": "cpu",
            "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT, "TOKENIZERS_PARALLELISM": "false"}


def tmpfs_available() -> bool:
    """A private tmpfs can be mounted (``unshare -rm``: user + mount namespaces, no root needed)."""
    import shutil

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k none /tmp"],
                           capture_output=True, text=True)
    return probe.returncode == 0


def on_tmpfs(mount_dir, options: str, command: list, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run ``command`` with a real tmpfs (mount ``options``, e.g. ``size=40m`` or ``ro``) mounted at
    ``mount_dir``, in a private mount namespace; ``PYTHONPATH`` is this checkout."""
    import shlex

    env = child_env()
    script = (f"mount -t tmpfs -o {options} none {shlex.quote(str(mount_dir))} && "
              + " ".join(shlex.quote(str(part)) for part in command))
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
