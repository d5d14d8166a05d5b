"""Held-out evaluation of a policy on a reasoning task with a verifiable answer (``arithmetic``, ``gsm8k``,
``math``): accuracy of greedy answers, pass@k of sampled ones (Chen et al.'s estimator,
:func:`evaluation.pass_at_k.pass_at_k`), the response length, and for the embedded task how many right answers
were reached through a wrong step (:func:`dschat.data.arithmetic_task.chain_errors`: right for the wrong reasons),
the fraction of the greedy chains' steps that follow from the prompt (``steps_right``) and of the chains with no
wrong step (``chains_right``).

    python -m evaluation.reasoning --policy outputs/reasoning/sft --data_name arithmetic --max_problems 200 \\
        --num_samples 8

prints one JSON object (the figures, the machine and the load it ran under). Prompts are built as step 3 builds
them (``[bos] + prompt``, left-padded); the verdicts are :func:`dschat.rewards.verify_answer`'s, the reward of
``--reward verifier``.
"""
from __future__ import annotations

import json
import os
from statistics import fmean
from typing import Dict, List, Sequence

import torch

from dschat.core.entrypoint import ArgumentParser, run_cli
from dschat.core.machine import machine_line
from dschat.core.seeding import seeded_rng
from dschat.data import PromptCollator, PromptDataset, load_pairs
from dschat.data.arithmetic_task import chain_errors, problem_of_prompt
from dschat.model import load_causal_lm, load_tokenizer, policy_model_dir
from dschat.rewards import verify_answer
from evaluation.pass_at_k import pass_at_k


@torch.no_grad()
def generate(policy, tokenizer, prompts: Sequence[str], num_samples: int, do_sample: bool, temperature: float,
             max_new_tokens: int, batch_size: int) -> List[List[tuple]]:
    """For each prompt, ``num_samples`` ``(response text, response tokens)``, greedy or sampled."""
    dataset = PromptDataset(list(prompts), tokenizer, max_prompt_len=512)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size,
                                         collate_fn=PromptCollator.for_tokenizer(tokenizer))
    out: List[List[tuple]] = [[] for _ in prompts]
    for batch in loader:
        prompt_ids = batch["input_ids"]
        seq = policy.generate(input_ids=prompt_ids, attention_mask=batch["attention_mask"], do_sample=do_sample,
                              temperature=temperature if do_sample else None, top_k=0 if do_sample else None,
                              num_return_sequences=num_samples, max_new_tokens=max_new_tokens,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        responses = seq[:, prompt_ids.shape[1]:]
        lengths = (responses != tokenizer.pad_token_id).sum(dim=1).tolist()
        texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
        for row, index in enumerate(batch["index"].tolist()):
            for sample in range(num_samples):
                out[index].append((texts[row * num_samples + sample], lengths[row * num_samples + sample]))
    return out


def summarize(prompts: Sequence[str], references: Sequence[str], greedy: Sequence[Sequence[tuple]],
              sampled: Sequence[Sequence[tuple]], task: str, ks: Sequence[int]) -> Dict[str, float]:
    """The figures of one policy from its greedy and sampled responses (see the module docstring)."""
    right = [verify_answer(g[0][0], ref, task) for g, ref in zip(greedy, references)]
    result = {"problems": len(prompts), "accuracy": fmean(right),
              "response_length": fmean(g[0][1] for g in greedy)}
    if task == "arithmetic":
        problems = [problem_of_prompt(p) for p in prompts]
        errors = [chain_errors(g[0][0], problem) for g, problem in zip(greedy, problems)]
        result["right_answers_with_a_wrong_step"] = sum(bool(e) for e, r in zip(errors, right) if r)
        result["steps_right"] = 1 - sum(map(len, errors)) / sum(len(p.operations) for p in problems)
        result["chains_right"] = fmean(not e for e in errors)
    if sampled and sampled[0]:
        counts = [sum(verify_answer(text, ref, task) for text, _ in samples)
                  for samples, ref in zip(sampled, references)]
        n = len(sampled[0])
        result.update({f"pass@{k}": fmean(pass_at_k(n, c, k) for c in counts) for k in ks if k <= n})
        result["sampled_response_length"] = fmean(length for samples in sampled for _, length in samples)
    return result


def evaluate_policy(path: str, data_name: str, max_problems: int, num_samples: int, temperature: float,
                    max_new_tokens: int, batch_size: int, seed: int, ks: Sequence[int]) -> Dict[str, float]:
    pairs = load_pairs(data_name, "validation")
    pairs = pairs[:max_problems] if max_problems else pairs
    path = policy_model_dir(path)
    tokenizer = load_tokenizer(path, padding_side="left")
    policy = load_causal_lm(path, tokenizer).eval()
    prompts, references = [p.prompt for p in pairs], [p.chosen for p in pairs]
    greedy = generate(policy, tokenizer, prompts, 1, False, 1.0, max_new_tokens, batch_size)
    with seeded_rng(seed):
        sampled = generate(policy, tokenizer, prompts, num_samples, True, temperature, max_new_tokens,
                           batch_size) if num_samples else []
    return summarize(prompts, references, greedy, sampled, data_name, ks)


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--policy", required=True, help="an SFT directory or a step-3 output directory")
    parser.add_argument("--data_name", default="arithmetic", help="arithmetic, gsm8k or math")
    parser.add_argument("--max_problems", type=int, default=200, help="first N held-out problems (0 = all)")
    parser.add_argument("--num_samples", type=int, default=8, help="samples per problem for pass@k (0: none)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max_new_tokens", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args(argv)
    result = evaluate_policy(args.policy, args.data_name, args.max_problems, args.num_samples, args.temperature,
                             args.max_new_tokens, args.batch_size, args.seed, args.ks)
    result.update(machine=machine_line(), load=os.getloadavg()[0])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    run_cli(main)
