"""evaluation/rm_score.py: seeded sampling, one scored record per prompt, the summary and the CLI outputs."""
from __future__ import annotations

import json
import re

import pytest
import torch

from evaluation.rm_score import main, named_policy, score_policy, summarize_scores

PROMPTS = ["Write a review of the lamp.\nReview:", "Give your opinion of the speaker.\nReview:",
           "Write a review of the book.\nReview:"]


def test_score_policy_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(7)
    expected_next = torch.rand(1)
    torch.manual_seed(7)
    first = score_policy("tiny-gemma", "tiny-gemma", PROMPTS, 0.8, 6, 2, seed=3)
    assert torch.rand(1) == expected_next
    assert [r["index"] for r in first] == [0, 1, 2] and [r["prompt"] for r in first] == PROMPTS
    assert all(1 <= r["response_tokens"] <= 6 and isinstance(r["score"], float) for r in first)
    assert score_policy("tiny-gemma", "tiny-gemma", PROMPTS, 0.8, 6, 2, seed=3) == first
    greedy = score_policy("tiny-gemma", "tiny-gemma", PROMPTS[:1], 0.0, 6, 1, seed=0)
    assert greedy == score_policy("tiny-gemma", "tiny-gemma", PROMPTS[:1], 0.0, 6, 1, seed=99)


def test_summary_is_mean_and_population_std():
    records = [{"score": s, "response_tokens": n, "finished": f} for s, n, f in ((1.0, 4, True), (3.0, 6, False))]
    assert summarize_scores(records) == {"count": 2, "score_mean": 2.0, "score_std": 1.0,
                                         "response_tokens_mean": 5.0, "finished_fraction": 0.5}
    with pytest.raises(ValueError, match="no scored responses"):
        summarize_scores([])


def test_policy_flag_names():
    assert named_policy("PPO=outputs/ppo/actor") == ("PPO", "outputs/ppo/actor")
    assert named_policy("outputs/dpo/") == ("dpo", "outputs/dpo/")


def test_cli_writes_responses_and_summary(tmp_path, capsys):
    main(["--reward_model", "tiny-gemma", "--policy", "A=tiny-gemma", "--max_eval_samples", "3",
          "--max_new_tokens", "4", "--output_dir", str(tmp_path)])
    lines = (tmp_path / "A.jsonl").read_text().splitlines()
    assert len(lines) == 3 and set(json.loads(lines[0])) == {"index", "prompt", "response", "score",
                                                             "response_tokens", "finished"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["policies"]["A"]["count"] == 3
    captured = capsys.readouterr()
    assert "| A |" in captured.out
    assert re.search(r"A: 100%.*\| 3/3 ", captured.err)  # a progress bar over the prompts, labelled by policy


def test_rm_score_and_best_of_n_take_a_run_directory_or_its_actor(tmp_path, tokenizer, capsys):
    """One convention: a step-3 run directory stands for its actor/; both tools accept both forms alike."""
    from dschat.model import load_causal_lm, load_reward_model
    from evaluation import best_of_n

    run, reward = tmp_path / "run", tmp_path / "rm"
    load_causal_lm("tiny-gemma", tokenizer, seed=5).save_pretrained(run / "actor")
    tokenizer.save_pretrained(run / "actor")
    load_reward_model("tiny-gemma", tokenizer, seed=6).save_pretrained(reward)
    tokenizer.save_pretrained(reward)
    summaries = main(["--reward_model", str(reward), "--policy", f"RUN={run}", "--policy", f"ACTOR={run / 'actor'}",
                      "--max_eval_samples", "3", "--max_new_tokens", "4", "--output_dir", str(tmp_path / "score"),
                      "--no_progress_bar"])
    assert summaries["RUN"]["count"] == 3
    assert {k: v for k, v in summaries["RUN"].items() if k != "policy"} == \
        {k: v for k, v in summaries["ACTOR"].items() if k != "policy"}
    best_of_n.main(["--reward_model", str(reward), "--policy", f"run={run}", "--policy", f"actor={run / 'actor'}",
                    "--num_prompts", "2", "--temperatures", "1.0", "--ns", "1,2", "--max_new_tokens", "4",
                    "--output_dir", str(tmp_path / "bon"), "--no_progress_bar"])
    table = json.loads((tmp_path / "bon" / "best_of_n.json").read_text())
    assert table["run"] == table["actor"]
    capsys.readouterr()
