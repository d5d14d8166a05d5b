"""Step 3 end to end on the embedded default: every termination rule runs, PPO resumes, ZeRO-3 in two
processes, and the per-token rewards / masks of real rollouts are laid out as the trainer expects."""
from __future__ import annotations

import os
import re

import pytest
import torch

import macro_oracle as oracle
from conftest import SFT_FLAGS, interrupt_then_resume, read_metrics, record_ppo_steps, torchrun
from dschat.cli.ppo import main as ppo_main
from dschat.cli.rm import main as rm_main
from dschat.cli.sft import main as sft_main


@pytest.fixture(scope="module")
def sft_rm(tmp_path_factory):
    sft = tmp_path_factory.mktemp("ppo_sft")
    rm = tmp_path_factory.mktemp("ppo_rm")
    sft_main(SFT_FLAGS + ["--output_dir", str(sft), "--max_steps", "40"])
    rm_main(["--model_name_or_path", str(sft), "--output_dir", str(rm), "--max_seq_len", "64",
             "--per_device_train_batch_size", "16", "--learning_rate", "5e-4", "--max_steps", "40",
             "--max_eval_samples", "32", "--no_progress_bar"])
    return str(sft), str(rm)


def ppo_flags(sft_rm, out, steps=2) -> list:
    sft, rm = sft_rm
    return ["--actor_model_name_or_path", sft, "--critic_model_name_or_path", rm, "--output_dir", str(out),
            "--max_prompt_seq_len", "32", "--max_new_tokens", "16", "--per_device_generation_batch_size", "8",
            "--per_device_train_batch_size", "4", "--max_steps", str(steps), "--max_eval_samples", "16",
            "--warmup_steps", "0", "--no_progress_bar", "--log_samples", "1"]


def expected_segments(rule: list, experiences: list) -> list:
    """The segment ids each rule must produce on the recorded rollouts, from the test oracle (fixed n-grams,
    the randomized rule's per-sample tables drawn from a generator seeded with --seed on rank 0, the running
    perplexity of the reference log-probs) or, for parsing, the parser run again on the same samples."""
    from dschat.rlhf.macro_action.termination import shuffled_length_table
    from dschat.rlhf.macro_action.termination.parsing import parsing_segments

    generator = torch.Generator().manual_seed(1234)  # --seed 1234 + rank 0
    expected = []
    for experience in experiences:
        mask = experience.action_mask
        if rule[1] in ("fixed", "ngram"):
            lengths = oracle.fixed_ngram_segmentation(mask, None if rule[3] == "inf" else int(rule[3]))
        elif rule[1] == "randomized":
            lengths = oracle.table_segmentation(mask, shuffled_length_table(mask.shape[0], generator=generator))
        elif rule[1] == "ppl":
            lengths = oracle.ppl_segmentation(experience.ref_logprobs, mask)
        else:
            segmentation = parsing_segments(experience.seq[:, 1:], mask, experience_tokenizer(), "spacy", 5)
            expected.append((segmentation.segment_ids.tolist(), int(segmentation.fallback.sum())))
            continue
        expected.append((oracle.segment_ids(mask, lengths), 0))
    return expected


def experience_tokenizer():
    from dschat.model import load_tokenizer

    return load_tokenizer("tiny-gemma", padding_side="left")


def macros_per_response(experience) -> float:
    """``macro/macros_per_response`` as the trainer logs it: over the whole rollout, whichever path (on-policy
    micro-batches or recomputed forwards) estimated the advantages."""
    ids, mask = experience.segment_ids, experience.action_mask
    return float((ids.max(dim=1).values + 1).sum()) / max(int((mask.sum(dim=1) > 0).sum()), 1)


@pytest.mark.parametrize("rule", [["--termination", "fixed", "--ngram", "5"],
                                  ["--termination", "ngram", "--ngram", "inf", "--sigma", "unit"],
                                  ["--termination", "randomized", "--sigma", "position"],
                                  ["--termination", "ppl", "--ratio", "macro"],
                                  ["--termination", "parsing", "--parser", "spacy", "--reward_agg", "mean"]],
                         ids=["fixed5", "infinite-unit", "randomized-position", "ppl-macro-ratio", "parsing-mean"])
def test_every_termination_rule_runs_end_to_end(sft_rm, tmp_path, monkeypatch, rule):
    """Each rule's cut reaches the update: the rollouts' segment ids are the rule's own (the oracle's, or the
    parser's on the same samples, with most samples parsed rather than fallen back to tokens), and the logged
    macro statistics are those of these segments."""
    experiences = record_ppo_steps(monkeypatch)
    ppo_main(ppo_flags(sft_rm, tmp_path) + rule)
    records = read_metrics(str(tmp_path))
    train = [r for r in records if "loss/policy" in r]
    assert len(train) == 2 and len(experiences) == 2
    for record, experience, (segment_ids, fallbacks) in zip(train, experiences, expected_segments(rule, experiences)):
        assert all(torch.isfinite(torch.tensor(v)) for v in record.values())
        assert experience.segment_ids.tolist() == segment_ids
        assert record["macro/fallback_samples"] == fallbacks < experience.seq.shape[0] / 2
        assert record["macro/macros_per_response"] == pytest.approx(macros_per_response(experience))
    assert os.path.exists(tmp_path / "actor" / "config.json") and os.path.exists(tmp_path / "critic" / "config.json")


def test_evaluation_shows_progress(sft_rm, tmp_path, capsys, monkeypatch):
    import functools

    from dschat.rlhf import ppo_trainer

    # every update drawn: a 2-batch evaluation can end within tqdm's 0.1 s redraw interval, and its bar
    # (leave=False) is then cleared without ever showing 100%
    monkeypatch.setattr(ppo_trainer, "tqdm", functools.partial(ppo_trainer.tqdm, mininterval=0))
    flags = [f for f in ppo_flags(sft_rm, tmp_path, steps=1) if f != "--no_progress_bar"]
    ppo_main(flags + ["--per_device_eval_batch_size", "8"])
    err = capsys.readouterr().err
    assert len(re.findall(r"eval: 100%.*\| 2/2 ", err)) == 2  # 16 prompts / 8: at the start and at the end
    assert re.search(r"train: 100%.*\| 1/1 ", err)


RESUME_RULES = [
    pytest.param(["--termination", "fixed", "--ngram", "5"], id="fixed5"),
    pytest.param(["--termination", "randomized"], id="randomized"),
    pytest.param(["--termination", "ngram", "--ngram", "inf"], id="infinite", marks=pytest.mark.slow),
    pytest.param(["--termination", "ppl"], id="ppl", marks=pytest.mark.slow),
    pytest.param(["--termination", "parsing", "--parser", "spacy"], id="parsing", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("rule", RESUME_RULES)
def test_interrupted_ppo_resumes_exactly(sft_rm, tmp_path, monkeypatch, rule):
    """Interrupt during step 4 (after step 3 was logged; the last checkpoint is step 2), resume, and match an
    uninterrupted run step for step for every termination rule (the RNG and the randomized rule's generator
    are in the snapshot); ``metrics.jsonl`` then reads as one run, without the re-run step 3 twice."""
    flags = ppo_flags(sft_rm, tmp_path, steps=4) + ["--save_steps", "2", "--eval_steps", "0"] + rule
    ppo_main(flags + ["--output_dir", str(tmp_path / "full")])
    interrupt_then_resume(ppo_main, flags, tmp_path / "resumed", monkeypatch)

    def rows(run):
        return [r for r in read_metrics(str(tmp_path / run)) if "loss/policy" in r]

    full, resumed = rows("full"), rows("resumed")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]  # no duplicate rows for the re-run step 3
    evals = [r["step"] for r in read_metrics(str(tmp_path / "resumed")) if "eval/score" in r]
    assert evals == [0, 4]
    for step in (3, 4):
        for key in ("objective/score", "loss/policy", "loss/value", "macro/macros_per_response"):
            assert resumed[step - 1][key] == pytest.approx(full[step - 1][key], rel=1e-4, abs=1e-5), (step, key)


def test_ppo_zero3_two_processes(sft_rm, tmp_path):
    torchrun("training/step3_rlhf_finetuning/main.py",
              ppo_flags(sft_rm, tmp_path) + ["--actor_zero_stage", "3", "--critic_zero_stage", "3",
                                             "--ngram", "5"])
    assert len([r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]) == 2


def test_eval_seed_fixes_the_evaluation_noise_and_gold_is_logged(sft_rm, tmp_path):
    """--eval_seed: two runs with different training seeds score the same SFT policy at step 0 with the same
    sampling noise (same numbers); without it the noise follows the run's seed. The embedded task's gold score
    of the evaluated responses is logged beside the RM score."""
    def step0(seed, eval_seed=None):
        out = tmp_path / f"s{seed}e{eval_seed}"
        extra = [] if eval_seed is None else ["--eval_seed", str(eval_seed)]
        ppo_main(ppo_flags(sft_rm, out, steps=1) + ["--seed", str(seed), "--eval_steps", "0"] + extra)
        return [r for r in read_metrics(str(out)) if "eval/score" in r][0]

    fixed = [step0(seed, eval_seed=7) for seed in (1, 2)]
    assert fixed[0]["eval/score"] == fixed[1]["eval/score"] and fixed[0]["eval/gold"] == fixed[1]["eval/gold"]
    assert -1 <= fixed[0]["eval/gold"] <= 1
    free = [step0(seed) for seed in (1, 2)]
    assert free[0]["eval/score"] != free[1]["eval/score"]


def test_evaluations_leave_training_unchanged(sft_rm, tmp_path):
    """Evaluations under --eval_seed restore every generator afterwards: a run evaluated every iteration and one
    evaluated every second iteration train alike (equal losses) and agree at the evaluations they share (the
    study's confirmation evaluates every 12 iterations instead of 4 and relies on this)."""
    def run(eval_steps):
        out = tmp_path / f"every{eval_steps}"
        ppo_main(ppo_flags(sft_rm, out, steps=4) + ["--seed", "3", "--eval_seed", "7", "--eval_steps", str(eval_steps)])
        records = read_metrics(str(out))
        return ({r["step"]: r["eval/score"] for r in records if "eval/score" in r},
                [(r["step"], r["loss/policy"], r["loss/value"]) for r in records if "loss/policy" in r])

    (every_evals, every_losses), (second_evals, second_losses) = run(1), run(2)
    assert set(second_evals) < set(every_evals) and len(second_evals) >= 3
    assert {step: every_evals[step] for step in second_evals} == second_evals
    assert every_losses == second_losses and len(every_losses) == 4
