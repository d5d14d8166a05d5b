"""The vLLM rollout engine against the trainer (issue 30): same tokens as the HF engine, the trainer's log-probs,
and exactly the actor's weights after every update — LoRA, tied embeddings, ZeRO-3 with two processes — and an
exact ``--resume``. Skipped where vLLM is not installed (``scripts/setup_env.sh`` installs it); ``import vllm``
costs ~10-50 s, paid once per test process."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import importlib.util
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, read_metrics, save_tied_llama
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.experience import SamplingConfig, rollout_masks, sequence_logprobs
from dschat.rlhf.rollout import PlainModel
from dschat.rlhf.rollout.hf import HFRolloutEngine
from dschat.data import PromptCollator, PromptDataset
from dschat.data.synthetic_task import generate_pairs
from dschat.model import load_causal_lm, load_tokenizer
from dschat.core.seeding import set_random_seed

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB per engine (an integer): these models need a few MiB



def vllm_engine(model, tokenizer, max_model_len: int = 96, **options):
    from dschat.rlhf.rollout.vllm_engine import VLLMRolloutEngine

    return VLLMRolloutEngine(PlainModel(model), tokenizer, max_model_len=max_model_len, **options)


def prompt_batch(tokenizer, count: int = 6):
    prompts = [pair.prompt for pair in generate_pairs(count, seed=1)]
    dataset = PromptDataset(prompts, tokenizer, 32)
    batch = PromptCollator.for_tokenizer(tokenizer)([dataset[i] for i in range(len(dataset))])
    return batch["input_ids"], batch["attention_mask"]


def global_draws() -> tuple:
    """One draw from each global generator a run's seed sets (Python's, NumPy's, torch's)."""
    return random.random(), float(np.random.rand()), torch.rand(4)


LONG_CONTEXT = 192
"""The tiny Gemma engine's context: room for a prompt longer than one of vLLM's KV-cache blocks on CPU (128 tokens),
so that a block its prefix cache holds can be reused (the partial-rollout tests)."""


@pytest.fixture(scope="module")
def gemma_built():
    """A random tiny Gemma (the embedded default's architecture), its vLLM engine, and what the global generators
    draw right after the engine was built under ``set_random_seed(5)``."""
    tokenizer = load_tokenizer("tiny-gemma", padding_side="left")
    model = load_causal_lm("tiny-gemma", tokenizer, "fp32", 3).eval()
    set_random_seed(5)
    engine = vllm_engine(model, tokenizer, max_model_len=LONG_CONTEXT)
    draws = global_draws()
    yield model, tokenizer, engine, draws
    del engine.llm
    gc.collect()


@pytest.fixture(scope="module")
def gemma(gemma_built):
    """The tiny Gemma, its tokenizer and its vLLM engine."""
    return gemma_built[:3]


def test_building_the_engine_leaves_the_global_generators_alone(gemma_built):
    """vLLM seeds every global generator with its own seed while it starts; the engine restores them, so what is
    drawn after building it is what the run's seed alone gives."""
    set_random_seed(5)
    expected = global_draws()
    drawn = gemma_built[3]
    assert drawn[:2] == expected[:2] and torch.equal(drawn[2], expected[2])


def test_vllms_startup_noise_is_dropped_and_its_other_warnings_pass(gemma):
    """Once an engine is built, every handler printing vLLM's records drops the start-up lines a user cannot act
    on (the chat-template warmup's traceback among them) and lets vLLM's other warnings through."""
    import logging

    from dschat.rlhf.rollout.vllm_engine import STARTUP_NOISE, StartupNoise

    handlers = logging.getLogger("vllm").handlers  # (the root's are pytest's own, replaced per test)
    assert handlers and all(any(isinstance(f, StartupNoise) for f in h.filters) for h in handlers)

    def passes(message: str) -> bool:
        return StartupNoise().filter(logging.LogRecord("vllm.renderers.base", logging.WARNING, "base.py", 380,
                                                       message, None, None))

    assert not any(passes(opening + " ...") for opening in STARTUP_NOISE)
    assert passes("Gemma's activation function was incorrectly set to exact GeLU")
    assert passes("libtcmalloc is not found in LD_PRELOAD.")


@pytest.fixture(scope="module")
def tied_llama(tmp_path_factory):
    """A tiny Llama with tied embeddings saved with SmolLM2's conventions (pad = eos; step 3's loader adds a
    ``<pad>`` and grows the embedding), and its vLLM engine (head size 32: vLLM's CPU attention has no 16)."""
    out = save_tied_llama(tmp_path_factory.mktemp("llama"), hidden_size=128)
    tokenizer = load_tokenizer(out, padding_side="left")
    model = load_causal_lm(out, tokenizer, "fp32", 0).eval()
    assert tokenizer.pad_token_id != tokenizer.eos_token_id and model.config.tie_word_embeddings
    engine = vllm_engine(model, tokenizer)
    yield model, tokenizer, engine
    del engine.llm
    gc.collect()


def hf_rollout(model, tokenizer, prompts, mask, sampling):
    return HFRolloutEngine(PlainModel(model), tokenizer.pad_token_id, tokenizer.eos_token_id).generate(
        prompts, mask, sampling).seq


GREEDY = SamplingConfig(max_new_tokens=16, do_sample=False)


@pytest.mark.parametrize("which", ["gemma", "tied_llama"])
def test_greedy_tokens_equal_the_hf_engine(which, request):
    model, tokenizer, engine = request.getfixturevalue(which)
    prompts, mask = prompt_batch(tokenizer)
    assert torch.equal(engine.generate(prompts, mask, GREEDY).seq, hf_rollout(model, tokenizer, prompts, mask, GREEDY))


@pytest.mark.parametrize("sampling", [SamplingConfig(max_new_tokens=16, temperature=0.8, top_k=50, top_p=1.0),
                                      SamplingConfig(max_new_tokens=16, temperature=1.3, top_k=5, top_p=0.9)],
                         ids=["table5", "truncating"])
def test_engine_logprobs_are_the_trainers_at_the_sampling_temperature(gemma, sampling):
    """The engine's sampled-token log-probs are log_softmax(logits / T) before top-k / top-p, as the trainer
    computes them (fp32: within 1e-4), also when top-k / top-p truncate hard."""
    model, tokenizer, engine = gemma
    prompts, mask = prompt_batch(tokenizer)
    torch.manual_seed(0)
    rollout = engine.generate(prompts, mask, sampling)
    attention_mask, action_mask = rollout_masks(rollout.seq, mask, tokenizer.eos_token_id)
    with torch.no_grad():
        trainer = sequence_logprobs(model, rollout.seq, attention_mask, sampling.temperature)
    on = action_mask.bool()
    assert on.sum() > 20
    assert (rollout.engine_logprobs[on] - trainer[on]).abs().max() < 1e-4
    assert torch.all(rollout.engine_logprobs[~on] == 0)


def test_samples_are_fixed_by_torchs_generator(gemma):
    """Per-row seeds come from torch's global generator: the run's seed, --eval_seed and --resume fix them."""
    _, tokenizer, engine = gemma
    prompts, mask = prompt_batch(tokenizer)
    sampling = SamplingConfig(max_new_tokens=16)
    draws = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        draws.append(engine.generate(prompts, mask, sampling).seq)
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])


def outside_the_truncated_set(model, seq, mask, eos_token_id, sampling) -> torch.Tensor:
    """How many response tokens of ``seq`` lie outside ``sampling``'s top-k / top-p set of the trainer's
    temperature-scaled distribution: k or more tokens more likely (``top_k`` > 0), or p or more of the mass on more
    likely tokens (the nucleus; ``top_p`` < 1). Margins of 1e-4 (logit, mass) leave the engine's rounding inside."""
    attention_mask, action_mask = rollout_masks(seq, mask, eos_token_id)
    with torch.no_grad():
        logits = model(seq, attention_mask=attention_mask).logits[:, :-1].float() / sampling.temperature
    probs = logits.softmax(-1)
    on = action_mask.bool()
    logits, probs, tokens = logits[on], probs[on], seq[:, 1:][on]
    chosen_logit = logits.gather(1, tokens[:, None])
    chosen_prob = probs.gather(1, tokens[:, None])
    outside = torch.zeros(len(tokens), dtype=torch.bool)
    if sampling.top_k:
        outside |= (logits > chosen_logit + 1e-4).sum(1) >= sampling.top_k
    if sampling.top_p < 1:
        outside |= (probs * (probs > chosen_prob)).sum(1) >= sampling.top_p + 1e-4
    return int(outside.sum())


@pytest.mark.parametrize("truncation", [dict(top_k=5, top_p=1.0), dict(top_k=0, top_p=0.5)], ids=["top_k", "top_p"])
def test_every_sampled_token_is_inside_the_truncated_set(gemma, truncation):
    """Top-k and top-p reach vLLM: no sampled token lies outside the truncated set (computed from the trainer's
    forward), while the same per-row seeds without the truncation sample tokens outside it (the set matters)."""
    model, tokenizer, engine = gemma
    prompts, mask = prompt_batch(tokenizer)
    truncated = SamplingConfig(max_new_tokens=16, temperature=1.5, **truncation)
    counts = []
    for sampling in (truncated, dataclasses.replace(truncated, top_k=0, top_p=1.0)):
        torch.manual_seed(2)
        seq = engine.generate(prompts, mask, sampling).seq
        counts.append(outside_the_truncated_set(model, seq, mask, tokenizer.eos_token_id, truncated))
    assert counts[0] == 0 and counts[1] >= 20, counts


@pytest.fixture
def eos_gemma(gemma):
    """The tiny Gemma with eos made likely: its eos embedding (tied: the eos logit's row) along the mean final
    hidden state of :func:`prompt_batch`, scaled to an eos logit of 2 there on average (the others' spread is
    ~0.25); the engine serves it for the test, the plain Gemma again after."""
    model, tokenizer, engine = gemma
    eosy = copy.deepcopy(model)
    prompts, mask = prompt_batch(tokenizer)
    with torch.no_grad():
        hidden = eosy(prompts, attention_mask=mask, output_hidden_states=True).hidden_states[-1][mask.bool()]
        direction = hidden.mean(0) / hidden.mean(0).norm()
        eosy.get_input_embeddings().weight[tokenizer.eos_token_id] = 2.0 / (hidden @ direction).mean() * direction
    engine.actor = PlainModel(eosy)
    engine.mark_stale()
    yield eosy, tokenizer, engine
    engine.actor = PlainModel(model)
    engine.mark_stale()


def test_only_pad_follows_the_eos(eos_gemma):
    """On a model that emits eos: each sampled response that ends early has its eos, then pad only; greedy rows
    equal the HF engine's (eos kept, pad after)."""
    model, tokenizer, engine = eos_gemma
    prompts, mask = prompt_batch(tokenizer)
    torch.manual_seed(1)
    responses = engine.generate(prompts, mask, SamplingConfig(max_new_tokens=16)).seq[:, prompts.shape[1]:]
    ended = 0
    for row in responses:
        eos = (row == tokenizer.eos_token_id).nonzero().flatten()
        if len(eos) and eos[0] < len(row) - 1:
            ended += 1
            assert torch.all(row[eos[0] + 1:] == tokenizer.pad_token_id), row
    assert ended >= 2, responses
    greedy = engine.generate(prompts, mask, GREEDY).seq
    assert (greedy[:, prompts.shape[1]:] == tokenizer.eos_token_id).any()
    assert torch.equal(greedy, hf_rollout(model, tokenizer, prompts, mask, GREEDY))


def engine_total(engine) -> float:
    return sum(engine.checksums().values())


def model_total(model) -> float:
    return sum(float(p.double().sum()) for p in model.parameters())


@pytest.mark.parametrize("which", ["gemma", "tied_llama"])
def test_engine_loads_the_updated_weights_only_when_marked_stale(which, request):
    """After an update the engine serves the old weights until told (``mark_stale``), then exactly the new ones:
    parameter sums equal and greedy tokens equal to the HF engine's."""
    model, tokenizer, engine = request.getfixturevalue(which)
    prompts, mask = prompt_batch(tokenizer)
    engine.generate(prompts, mask, GREEDY)  # loads the current weights if the fixture's engine is fresh
    before = engine.generate(prompts, mask, GREEDY).seq
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.2)
    assert torch.equal(engine.generate(prompts, mask, GREEDY).seq, before)  # not synced: old weights
    engine.mark_stale()
    after = engine.generate(prompts, mask, GREEDY).seq
    assert engine.last_sync_seconds > 0
    assert engine_total(engine) == pytest.approx(model_total(model), rel=1e-6)
    assert torch.equal(after, hf_rollout(model, tokenizer, prompts, mask, GREEDY))
    assert not torch.equal(after, before)


def test_the_engine_stays_the_actor_over_many_syncs(gemma):
    """Eight updates, each synced before the next rollout: every rollout's log-probs are the trainer's on the
    updated weights (vLLM's CPU packing of the linear layers must follow every load, not only the first)."""
    model, tokenizer, engine = gemma
    actor = copy.deepcopy(model)
    engine.actor = PlainModel(actor)
    prompts, mask = prompt_batch(tokenizer)
    sampling = SamplingConfig(max_new_tokens=8)
    generator = torch.Generator().manual_seed(4)
    gaps = []
    try:
        for _ in range(8):
            with torch.no_grad():
                for param in actor.parameters():
                    param.add_(torch.randn(param.shape, generator=generator) * 0.02)
            engine.mark_stale()
            rollout = engine.generate(prompts, mask, sampling)
            attention_mask, action_mask = rollout_masks(rollout.seq, mask, tokenizer.eos_token_id)
            with torch.no_grad():
                trainer = sequence_logprobs(actor, rollout.seq, attention_mask, sampling.temperature)
            on = action_mask.bool()
            gaps.append(float((rollout.engine_logprobs[on] - trainer[on]).abs().max()))
    finally:
        engine.actor = PlainModel(model)
        engine.mark_stale()
    assert max(gaps) < 1e-4, gaps


def test_lora_adapters_reach_the_engine_merged(gemma):
    """A peft-wrapped actor (--actor_lora_dim) syncs as W + (α/r)·B·A under the plain model's names."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer, engine = gemma
    peft_model = get_peft_model(load_causal_lm("tiny-gemma", tokenizer, "fp32", 3),
                                LoraConfig(r=4, lora_alpha=16, target_modules="all-linear")).eval()
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.3)
    engine.actor = PlainModel(peft_model)
    engine.mark_stale()
    prompts, mask = prompt_batch(tokenizer)
    synced = engine.generate(prompts, mask, GREEDY).seq
    merged = peft_model.merge_and_unload()
    assert engine_total(engine) == pytest.approx(model_total(merged), rel=1e-6)
    assert torch.equal(synced, hf_rollout(merged, tokenizer, prompts, mask, GREEDY))
    engine.actor = PlainModel(model)
    engine.mark_stale()


VLLM_PPO = ["--actor_model_name_or_path", "tiny-gemma", "--critic_model_name_or_path", "tiny-gemma",
            "--max_prompt_seq_len", "16", "--max_new_tokens", "8", "--per_device_generation_batch_size", "8",
            "--per_device_train_batch_size", "4", "--max_eval_samples", "8", "--per_device_eval_batch_size", "8",
            "--no_progress_bar", "--log_samples", "0", "--warmup_steps", "0", "--actor_learning_rate", "2e-3",
            "--rollout_engine", "vllm", "--seed", "11"]
"""Step 3 with the vLLM engine on random tiny Gemmas, a learning rate that moves the actor visibly."""


def train_rows(out) -> dict:
    return {r["step"]: r for r in read_metrics(str(out)) if "loss/policy" in r}


ENGINES_OF_RUNS: list = []
"""Every engine a step-3 run of this module built. They live until the process ends: shutting a vLLM engine down
destroys the process groups it shares with DeepSpeed, which the next run in the same process still holds (one
run per process, as a training job is, never meets this)."""


@pytest.fixture
def kept_engines(monkeypatch):
    """The rollout engines step 3 builds in this test, kept for inspection after the run."""
    from dschat.stages import ppo

    built = []
    real = ppo.build_rollout_engine

    def keep(*args, **kwargs):
        built.append(real(*args, **kwargs))
        ENGINES_OF_RUNS.append(built[-1])
        return built[-1]

    monkeypatch.setattr(ppo, "build_rollout_engine", keep)
    return built


class FirstRollout(Exception):
    """Stops a step-3 run at its first rollout, carrying that rollout's sequences."""


def first_rollout(monkeypatch, flags) -> torch.Tensor:
    """The sequences of the first rollout a step-3 run with ``flags`` samples — the evaluation at the start: the
    evaluation prompts in their fixed order, the actor as loaded — after which the run stops."""
    from dschat.stages import ppo

    real = ppo.build_rollout_engine

    def build(*args, **kwargs):
        engine = real(*args, **kwargs)
        ENGINES_OF_RUNS.append(engine)
        generate = engine.generate

        def stop_after(*call, **options):
            raise FirstRollout(generate(*call, **options).seq)

        engine.generate = stop_after
        return engine

    monkeypatch.setattr(ppo, "build_rollout_engine", build)
    with pytest.raises(FirstRollout) as stopped:
        ppo_main(flags)
    return stopped.value.args[0]


@pytest.fixture(scope="module")
def saved_gemma(tmp_path_factory) -> str:
    """A random tiny Gemma saved as a checkpoint: an actor whose weights do not follow the run's seed."""
    out = tmp_path_factory.mktemp("saved-gemma")
    tokenizer = load_tokenizer("tiny-gemma")
    load_causal_lm("tiny-gemma", tokenizer, "fp32", 3).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_the_runs_seed_governs_the_samples(tmp_path, monkeypatch, saved_gemma, engine):
    """The start's evaluation samples the same prompts with the same weights whatever the seed: ``--seed 11``
    twice gives the same responses, ``--seed 12`` others, with either engine (the vLLM engine's per-row seeds come
    from torch's generator, which building the engine must leave as the run's seed set it)."""
    flags = VLLM_PPO + ["--actor_model_name_or_path", saved_gemma, "--rollout_engine", engine]
    seqs = [first_rollout(monkeypatch, flags + ["--seed", str(seed), "--output_dir", str(tmp_path / str(run))])
            for run, seed in enumerate((11, 11, 12))]
    assert torch.equal(seqs[0], seqs[1]) and not torch.equal(seqs[0], seqs[2])


@pytest.mark.parametrize("flags, moved", [([], 1e-3), (["--actor_lora_dim", "4", "--actor_learning_rate", "2e-2"], 1e-3)],
                         ids=["full", "lora"])
def test_after_ppo_updates_the_engine_holds_the_actor(tmp_path, kept_engines, flags, moved):
    """Three PPO iterations with the vLLM engine: every rollout's log-probs match the trainer's (the engine was
    synced after each update: skipping one leaves a gap of the update's size), the run's last evaluation left
    the engine holding exactly the saved actor (sums and greedy tokens), and the actor did move (some weight by
    more than ``moved`` from the one the run started from)."""
    ppo_main(VLLM_PPO + flags + ["--output_dir", str(tmp_path), "--max_steps", "3"])
    rows = train_rows(tmp_path)
    assert sorted(rows) == [1, 2, 3]
    assert all(row["rollout/logprob_abs_diff_max"] < 1e-4 for row in rows.values()), rows
    tokenizer = load_tokenizer(str(tmp_path / "actor"), padding_side="left")
    actor = load_causal_lm(str(tmp_path / "actor"), tokenizer, "fp32", 0).eval()
    initial = load_causal_lm("tiny-gemma", tokenizer, "fp32", 11)  # the run's seed builds its actor
    distance = max(float((a - b).abs().max()) for a, b in zip(actor.parameters(), initial.parameters()))
    assert distance > moved, distance  # the actor moved away from the reference
    engine = kept_engines[0]
    assert engine_total(engine) == pytest.approx(model_total(actor), rel=1e-6)
    prompts, mask = prompt_batch(tokenizer)
    greedy = SamplingConfig(max_new_tokens=8, do_sample=False)  # the run's engine holds 16 + 8 tokens per row
    assert torch.equal(engine.generate(prompts, mask, greedy).seq, hf_rollout(actor, tokenizer, prompts, mask, greedy))


def test_resume_with_the_vllm_engine_is_exact(tmp_path, kept_engines):
    """Two iterations, a checkpoint, then --resume for the third: the same rows as three uninterrupted ones (the
    engine's seeds come from the restored generator, its weights from the restored actor)."""
    ppo_main(VLLM_PPO + ["--output_dir", str(tmp_path / "full"), "--max_steps", "3"])
    part = VLLM_PPO + ["--output_dir", str(tmp_path / "part"), "--max_steps", "3", "--save_steps", "2"]
    stop_after = {"calls": 0}
    from dschat.rlhf.ppo_trainer import PPOTrainer

    real_step = PPOTrainer.step

    def step_then_die(self, batch):
        if stop_after["calls"] == 2:
            raise KeyboardInterrupt  # a crash after step 2's checkpoint
        stop_after["calls"] += 1
        return real_step(self, batch)

    PPOTrainer.step = step_then_die
    try:
        with pytest.raises(KeyboardInterrupt):
            ppo_main(part)
    finally:
        PPOTrainer.step = real_step
    ppo_main(part + ["--resume"])
    full, resumed = train_rows(tmp_path / "full"), train_rows(tmp_path / "part")
    assert sorted(resumed) == [1, 2, 3]
    assert resumed[3] == full[3]


@pytest.mark.slow
def test_zero3_two_processes_sync_the_engine(tmp_path):
    """Actor and critic under ZeRO-3 in two processes (torchrun), each with its own colocated engine: the
    parameters are gathered a group at a time for the sync, and every rollout after an update matches the
    trainer's log-probs."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    flags = VLLM_PPO + ["--actor_zero_stage", "3", "--critic_zero_stage", "3",
                                                      "--per_device_generation_batch_size", "4",
                                                      "--output_dir", str(tmp_path), "--max_steps", "2"]
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                             "29563", "training/step3_rlhf_finetuning/main.py", *flags],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = train_rows(tmp_path)
    # the policy moved: the sampled KL estimate (k1, signed) is away from 0 after the first update
    assert sorted(rows) == [1, 2] and abs(rows[2]["objective/kl"]) > 1e-3
    assert all(row["rollout/logprob_abs_diff_max"] < 1e-4 for row in rows.values()), rows


@pytest.mark.slow  # vLLM imported in the producer and in the trainer (~2 min)
def test_an_async_producer_runs_the_vllm_engine(tmp_path):
    """--rollout_engine vllm --async_rollout 1: the producer samples with vLLM on its copy of the actor, whose
    sampled-token log-probs are the behaviour log-probs: at staleness 0 they are the trainer's to < 1e-4 (engine
    kernels), one version later they differ by the update."""
    from conftest import TINY_PPO

    ppo_main(TINY_PPO + ["--termination", "fixed", "--ngram", "3", "--eval_steps", "0", "--output_dir", str(tmp_path),
                         "--max_steps", "3", "--async_rollout", "1", "--rollout_is", "macro", "--rollout_engine", "vllm"])
    rows = [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]
    assert [r["rollout/staleness_max"] for r in rows] == [0, 1, 1]
    assert rows[0]["rollout/logprob_abs_diff_max"] < 1e-4 < rows[1]["rollout/logprob_abs_diff_max"]


def test_episodes_on_the_vllm_engine_are_token_in_token_out(gemma):
    """--env episodes sampled by vLLM, turn by turn on token ids: between the two replies of every episode lie
    exactly the observation's tokens (tokenised here), the engine's log-probs of the replies are the trainer's on
    the assembled sequence (fp32: within 1e-4), and 0 on the observation tokens (multi-turn.md)."""
    from dschat.data import PromptCollator, PromptDataset
    from dschat.rlhf.environments import environment_tasks, make_environment
    from dschat.rlhf.rollout.episodes import EpisodeRunner
    from dschat.rlhf.rollout.turns import prompt_text

    model, tokenizer, engine = gemma
    tasks = environment_tasks("consistency", "eval", 4)
    texts = [prompt_text(tokenizer, make_environment("consistency").reset(task)[0]) for task in tasks]
    dataset = PromptDataset(texts, tokenizer, 32)
    batch = PromptCollator.for_tokenizer(tokenizer)([dataset[i] for i in range(len(tasks))])
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.0, top_k=50, top_p=1.0)
    torch.manual_seed(0)
    runner = EpisodeRunner("consistency", tasks, tokenizer, engine, max_turns=2, max_episode_tokens=48)
    rollout = runner.run(batch["input_ids"], batch["attention_mask"], batch["index"], sampling)
    observation = tokenizer("Say your first character again.\n", add_special_tokens=False)["input_ids"]
    on = rollout.action_mask.bool()
    for row in range(len(tasks)):
        attended = rollout.attention_mask[row].bool()
        tokens, actions = rollout.seq[row][attended].tolist(), on[row][attended[1:]].tolist()
        prompt = int(batch["attention_mask"][row].sum())
        first = actions.index(True, prompt - 1)
        gap = actions.index(False, first)
        assert tokens[gap + 1:gap + 1 + len(observation)] == observation
        assert not any(actions[gap:gap + len(observation)]) and actions[gap + len(observation)]
    with torch.no_grad():
        trainer = sequence_logprobs(model, rollout.seq, rollout.attention_mask, sampling.temperature)
    assert (rollout.engine_logprobs[on] - trainer[on]).abs().max() < 1e-4
    assert torch.all(rollout.engine_logprobs[~on] == 0)


# -- --partial_rollout on the vLLM engine (dschat/rlhf/rollout/partial.py) ------------------------------------------
def long_prompts(tokenizer, rows: int = 4, length: int = 140):
    """Random prompts longer than a KV-cache block (the first row left-padded by 3), fixed by their own generator."""
    prompts = torch.randint(3, 200, (rows, length), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(prompts)
    prompts[0, :3], mask[0, :3] = tokenizer.pad_token_id, 0
    return prompts, mask


VLLM_FORWARD_ATOL = 1e-4
"""vLLM's log-probs against a transformers forward in fp32 (the engine's kernels; the other vLLM tests' bound)."""


@contextlib.contextmanager
def serving(engine, actor):
    """The engine serving ``actor`` for the block, the fixture's model again after."""
    model = engine.actor
    engine.actor = PlainModel(actor)
    engine.mark_stale()
    try:
        yield
    finally:
        engine.actor = model
        engine.mark_stale()


def test_partial_rollouts_on_vllm_take_each_tokens_log_prob_from_its_own_version(gemma):
    """Responses of 12 tokens decoded by vLLM in chunks of 4, version 1 (other weights) loaded after the first
    chunk: the first 4 tokens of each response carry version 0, the rest version 1, and each token's behaviour
    log-prob (vLLM's own) equals a forward, done here, of its own version's weights over the prefix (within
    VLLM_FORWARD_ATOL), not of the other's. The prompts are longer than a KV-cache block, which vLLM's prefix
    cache keeps from the first chunk: continuing with it after the load would mix the old version's keys in."""
    from dschat.rlhf.rollout.partial import sample_in_chunks
    from test_async_partial import TEMPERATURE, logprobs_of_each_version

    model, tokenizer, engine = gemma
    actor = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(7)
    weights = [copy.deepcopy(actor.state_dict())]
    weights.append({k: v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
                    for k, v in weights[0].items()})
    prompts, mask = long_prompts(tokenizer)
    calls = []

    def between_chunks(score):
        calls.append(len(calls))
        if len(calls) == 1:
            score()
            actor.load_state_dict(weights[1])
            engine.mark_stale()
        return 1

    sampling = SamplingConfig(max_new_tokens=12, temperature=TEMPERATURE)
    with serving(engine, actor):
        torch.manual_seed(0)
        rollout = sample_in_chunks(engine, actor, prompts, mask, sampling, 4, 0, between_chunks,
                                   tokenizer.pad_token_id, tokenizer.eos_token_id, TEMPERATURE)
    assert calls == [0, 1]
    per_version = logprobs_of_each_version(model, weights, rollout.seq, mask, tokenizer.eos_token_id)
    on = per_version[0][1]
    token_version = torch.full_like(rollout.engine_logprobs, -1, dtype=torch.long)
    token_version[:, prompts.shape[1] - 1:] = rollout.token_versions
    response = on[:, prompts.shape[1] - 1:]
    position = torch.arange(12).expand_as(response)
    assert response.sum() > 40
    assert torch.equal(rollout.token_versions[response], (position[response] >= 4).long())
    expected = torch.where(token_version == 0, per_version[0][0], per_version[1][0])
    gap = float((rollout.engine_logprobs[on] - expected[on]).abs().max())
    assert gap < VLLM_FORWARD_ATOL, gap
    other = torch.where(token_version == 0, per_version[1][0], per_version[0][0])
    assert (rollout.engine_logprobs[on] - other[on]).abs().max() > 1e-2
    assert torch.all(rollout.engine_logprobs[~on] == 0)


def test_a_prompt_longer_than_a_kv_block_seen_before_a_sync_is_prefilled_by_the_new_weights(gemma):
    """Whole rollouts too: the same long prompts sampled before and after an update (an evaluation's prompts are):
    after the sync, the log-probs are a forward, done here, of the new weights, not mixed with the keys and values
    vLLM's prefix cache kept from the old ones."""
    from test_async_partial import TEMPERATURE, by_hand_logprobs

    model, tokenizer, engine = gemma
    actor = copy.deepcopy(model)
    prompts, mask = long_prompts(tokenizer)
    sampling = SamplingConfig(max_new_tokens=4, temperature=TEMPERATURE)
    with serving(engine, actor):
        engine.generate(prompts, mask, sampling)
        generator = torch.Generator().manual_seed(8)
        with torch.no_grad():
            for param in actor.parameters():
                param.add_(0.05 * torch.randn(param.shape, generator=generator))
        engine.mark_stale()
        rollout = engine.generate(prompts, mask, sampling)
    expected, on = by_hand_logprobs(actor, rollout.seq, mask, tokenizer.eos_token_id)
    assert float((rollout.engine_logprobs[on] - expected[on]).abs().max()) < VLLM_FORWARD_ATOL


def test_a_resumed_vllm_request_draws_new_noise(gemma):
    """On a model whose every next-token distribution is uniform (all weights 0), a response decoded in chunks of 4
    repeats no chunk in any row: each chunk's requests get new seeds (a resumed request under its first seed would
    replay the first chunk's tokens exactly), drawn from torch's generator, so the same seed gives the same rollout."""
    from dschat.rlhf.rollout.partial import sample_in_chunks

    model, tokenizer, engine = gemma
    flat = copy.deepcopy(model)
    with torch.no_grad():
        for param in flat.parameters():
            param.zero_()
    prompts, mask = prompt_batch(tokenizer)
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0, top_k=0, top_p=1.0)
    seqs = []
    with serving(engine, flat):
        for seed in (0, 0):
            torch.manual_seed(seed)
            seqs.append(sample_in_chunks(engine, flat, prompts, mask, sampling, 4, 0, lambda score: 0,
                                         tokenizer.pad_token_id, tokenizer.eos_token_id, 1.0).seq)
    chunks = seqs[0][:, prompts.shape[1]:].reshape(len(prompts), 3, 4)
    assert not (chunks[:, 1:] == chunks[:, :1]).all(dim=2).any(), chunks
    assert torch.equal(seqs[0], seqs[1])


@pytest.mark.slow  # vLLM imported in the producer and in the trainer (~2 min)
def test_partial_rollouts_on_an_async_vllm_producer_mix_versions(tmp_path, monkeypatch):
    """Step 3 with --rollout_engine vllm --async_rollout 1 --partial_rollout --partial_rollout_chunk 4, responses of
    16 tokens and a producer slower than the trainer: the run finishes with multi-version responses in its
    metrics, and every response token's behaviour log-prob is a forward, done here, of its own version's weights."""
    from test_async_partial import FLAGS, check_each_token_against_its_version, record_rollouts

    taken, versions = record_rollouts(monkeypatch, delay=0.5)
    ppo_main(FLAGS + ["--rollout_engine", "vllm", "--partial_rollout", "--partial_rollout_chunk", "4",
                      "--output_dir", str(tmp_path), "--max_steps", "4"])
    rows = [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]
    assert len(rows) == len(taken) == 4
    assert max(r["rollout/multi_version_responses"] for r in rows) > 0
    assert check_each_token_against_its_version(taken, versions, rows, atol=VLLM_FORWARD_ATOL) > 0
