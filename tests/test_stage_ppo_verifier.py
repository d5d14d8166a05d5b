"""Step 3 with the answer verifier (``--reward verifier``): each prompt is scored against its own reference
solution, the flags reach both reward sources, a dataset without answers is refused in one line, and a run with
the step rule trains end to end with the rule's cuts in its rollouts."""
from __future__ import annotations

import pytest
import torch

from conftest import one_line_error, read_metrics, record_ppo_steps
from dschat.cli.ppo import build_parser
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.reward_sources import VerifierReward


def left_to_right(prompt: str) -> int:
    """The answer of an arithmetic prompt ("Start N, mod 10, R rounds:" then one "x:?<op><b>=?" line an operation
    of the program, run R times), evaluated here."""
    lines = prompt.split("\n")[:-1]
    head = lines[0].split(", ")
    value = int(head[0][len("Start "):])
    for op, operand in [(line[3], line[4]) for line in lines[1:]] * int(head[2].split()[0]):
        value = eval(f"({value} {op} {operand}) % 10")  # noqa: S307 -- digits and one operator
    return value


def test_verifier_flags_reach_both_reward_sources_each_with_its_own_references(tmp_path):
    """``prompt_texts`` gives references parallel to the prompts (PPO's phase of train, and the held-out split);
    ``--verifier_format_weight`` (non-default) reaches both sources (mutation: a list swapped or the weight dropped)."""
    from dschat.stages.ppo import make_reward_sources
    from dschat.stages.startup import prompt_texts

    args = build_parser().parse_config(["--reward", "verifier", "--data_name", "arithmetic", "--data_split", "5,0,5",
                                        "--verifier_format_weight", "0.25", "--output_dir", str(tmp_path)])
    train_prompts, eval_prompts, train_refs, eval_refs = prompt_texts(args, tokenizer=None)
    assert len(train_prompts) == 8000 and len(eval_prompts) == 400
    train, evaluation = make_reward_sources(args, engines=None, train_tasks=train_refs, eval_tasks=eval_refs)
    for source, prompts in ((train, train_prompts), (evaluation, eval_prompts)):
        assert isinstance(source, VerifierReward) and source.task == "arithmetic"
        index = torch.tensor([3, 1, 0])
        answers = [left_to_right(prompts[i]) for i in index.tolist()]
        responses = [f"Answer: {answers[0]}", f"Answer: {answers[1] + 1}", "no answer"]
        scores, _ = source(None, None, responses, index)
        assert scores.tolist() == [1.25, 0.25, 0.0]
        with pytest.raises(ValueError, match="task index"):
            source(None, None, responses, None)


def test_verifier_on_a_dataset_without_answers_is_one_line(capsys, tmp_path):
    error = one_line_error(ppo_main, ["--reward", "verifier", "--data_name", "synthetic", "--output_dir",
                                      str(tmp_path)], capsys)
    assert "--reward verifier needs a dataset with a verifiable final answer" in error and "arithmetic" in error


def test_ppo_with_the_verifier_and_the_step_rule_runs_end_to_end(tmp_path, monkeypatch):
    """Two iterations from the untrained tiny model with ``--step_delimiter e`` (a letter its random text holds
    often, so rows have many steps): the rollouts' segment ids are the step cut computed here from each token's
    own decode, and the logged score is the mean verdict of the decoded responses (all wrong at this stage)."""
    from dschat.model import load_tokenizer

    experiences = record_ppo_steps(monkeypatch)
    ppo_main(["--reward", "verifier", "--data_name", "arithmetic", "--data_split", "5,0,5",
              "--actor_model_name_or_path", "tiny-gemma", "--output_dir", str(tmp_path),
              "--max_prompt_seq_len", "64", "--max_new_tokens", "16", "--per_device_generation_batch_size", "4",
              "--per_device_train_batch_size", "4", "--max_steps", "2", "--max_eval_samples", "8",
              "--warmup_steps", "0", "--no_progress_bar", "--log_samples", "0", "--termination", "step",
              "--step_delimiter", "e", "--step_min_tokens", "2"])
    tokenizer = load_tokenizer("tiny-gemma")
    train = [r for r in read_metrics(str(tmp_path)) if "loss/policy" in r]
    assert len(train) == 2 and len(experiences) == 2
    cut_rows = 0
    for record, experience in zip(train, experiences):
        assert record["objective/score"] == 0.0
        for row in range(experience.seq.shape[0]):
            on = experience.action_mask[row].bool()
            ids = experience.seq[row, 1:][on].tolist()
            ends = [i for i, t in enumerate(ids) if "e" in tokenizer.decode([t], skip_special_tokens=True)]
            expected, current, macro = [], 0, 0
            for i in range(len(ids)):
                expected.append(macro)
                current += 1
                if i in ends and current >= 2 and i < len(ids) - 1:
                    macro, current = macro + 1, 0
            if current and current < 2 and macro:  # a short tail joins the macro before
                expected = [m if m < macro else macro - 1 for m in expected]
            assert experience.segment_ids[row][on].tolist() == expected
            cut_rows += macro > 0
    assert cut_rows > 0
