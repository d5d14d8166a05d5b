"""Sample program completions from policies for pass@k (paper Table 3, §4.5), in the JSONL format that
``python -m evaluation.pass_at_k --samples`` reads.

    python -m evaluation.code_samples --policy PPO=outputs/runs/ppo/codegemma-2b/apps/ppo \\
        --policy MA-PPO=outputs/runs/ppo/codegemma-2b/apps/mappo --data_name apps --split test --num_samples 5 \\
        --output_dir outputs/table3/codegemma-2b

writes ``NAME.jsonl`` (``{"task_id", "completion"}``, ``--num_samples`` lines per task) per policy and
``tasks.jsonl`` (the tasks as ``CodeTask`` dicts, for ``pass_at_k --tasks``). Queries are built as step 3 builds
them (``[bos] + prompt``, left-padded); tasks whose prompt exceeds ``--max_prompt_len`` tokens are skipped.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Dict, List, Sequence

import torch

from dschat.core.entrypoint import ArgumentParser, run_cli
from dschat.data import PromptCollator, PromptDataset
from dschat.data.loading import load_code_tasks
from dschat.data.schema import CodeTask
from dschat.model import load_causal_lm, load_tokenizer, policy_model_dir
from dschat.core.seeding import seeded_rng


@torch.no_grad()
def sample_completions(policy_path: str, tasks: Sequence[CodeTask], num_samples: int, temperature: float,
                       top_k: int, top_p: float, max_new_tokens: int, max_prompt_len: int, batch_size: int,
                       seed: int) -> List[Dict[str, str]]:
    """``num_samples`` sampled completions per task (task order, samples contiguous) from the policy at
    ``policy_path`` (a model directory or a step-3 run directory, :func:`~dschat.model.policy_model_dir`)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    policy_path = policy_model_dir(policy_path)
    tokenizer = load_tokenizer(policy_path, padding_side="left")
    policy = load_causal_lm(policy_path, tokenizer).to(device).eval()
    dataset = PromptDataset([task.prompt for task in tasks], tokenizer, max_prompt_len)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size,
                                         collate_fn=PromptCollator.for_tokenizer(tokenizer))
    samples = []
    with seeded_rng(seed):
        for batch in loader:
            prompt_ids = batch["input_ids"].to(device)
            seq = policy.generate(input_ids=prompt_ids, attention_mask=batch["attention_mask"].to(device),
                                  do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p,
                                  num_return_sequences=num_samples, max_new_tokens=max_new_tokens,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            texts = tokenizer.batch_decode(seq[:, prompt_ids.shape[1]:], skip_special_tokens=True)
            for row, index in enumerate(batch["index"].tolist()):
                for sample in range(num_samples):
                    samples.append({"task_id": tasks[index].task_id,
                                    "completion": texts[row * num_samples + sample]})
    return samples


def write_jsonl(rows: Sequence[dict], path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv=None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--policy", action="append", required=True, metavar="NAME=DIR",
                        help="a policy (SFT directory or step-3 output directory); repeat")
    parser.add_argument("--data_name", default="apps", help="code dataset: apps or humaneval")
    parser.add_argument("--data_path", default=None, help="local file in the dataset's schema")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max_tasks", type=int, default=0, help="first N tasks (0 = all)")
    parser.add_argument("--num_samples", type=int, default=5, help="samples per task (pass@k needs k or more)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top_k", type=int, default=50)
    parser.add_argument("--top_p", type=float, default=0.95)
    parser.add_argument("--max_new_tokens", type=int, default=512)
    parser.add_argument("--max_prompt_len", type=int, default=600)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    tasks = load_code_tasks(args.data_name, args.split, args.data_path)
    tasks = tasks[:args.max_tasks] if args.max_tasks else tasks
    write_jsonl([asdict(task) for task in tasks], os.path.join(args.output_dir, "tasks.jsonl"))
    for spec in args.policy:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--policy {spec!r}: expected NAME=DIR")
        samples = sample_completions(path, tasks, args.num_samples, args.temperature, args.top_k,
                                     args.top_p, args.max_new_tokens, args.max_prompt_len, args.batch_size,
                                     args.seed)
        write_jsonl(samples, os.path.join(args.output_dir, f"{name}.jsonl"))
        print(f"{name}: {len(samples)} completions for {len(samples) // max(1, args.num_samples)} tasks "
              f"-> {args.output_dir}/{name}.jsonl")


if __name__ == "__main__":
    run_cli(main)
