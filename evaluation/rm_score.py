"""Held-out reward-model score of policies (paper §4.1 "Evaluation", Table 2, Table 7): sample one response per
validation prompt from each policy checkpoint, score ``[prompt | response]`` with a reward model, report
mean ± std, and keep every response and score as JSONL.

    python -m evaluation.rm_score --reward_model outputs/demo/rm --data_name synthetic --max_eval_samples 256 \\
        --policy SFT=outputs/demo/sft --policy PPO=outputs/demo/ppo --output_dir outputs/rm_score

Sampling and scoring are those of step 3's evaluation (``PPOTrainer.evaluate``): left-padded ``[bos] +
prompt``, ``generate`` with temperature / top-k / top-p (the paper samples at temperature 0.8, Appendix D.4),
the response runs to its first EOS, and the reward is the RM head at the last real token of the generated ids.
Python API: :func:`score_policy`, :func:`summarize_scores`, :func:`validation_prompts`, :func:`write_jsonl`.
"""
from __future__ import annotations

import argparse
import json
import os
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence

import torch
from tqdm.auto import tqdm

from dschat.rlhf.experience import decode_responses, rollout_masks
from dschat.core.entrypoint import ArgumentParser, run_cli
from dschat.data import PromptCollator, PromptDataset
from dschat.core.config import ConfigError
from dschat.model import load_causal_lm, load_reward_model, load_tokenizer, policy_model_dir, sequence_scores
from dschat.model.names import check_model_name
from dschat.core.seeding import seeded_rng
from dschat.data.stage_data import eval_prompts


def validation_prompts(data_name: str, data_path: Optional[str] = None, eval_data_path: Optional[str] = None,
                       max_samples: int = 0) -> List[str]:
    """The prompts of the held-out split of ``data_name`` (the first ``max_samples``; 0 = all), as every stage
    reads them."""
    return eval_prompts(SimpleNamespace(data_name=data_name, data_path=data_path, eval_data_path=eval_data_path,
                                        max_eval_samples=max_samples))


def _check_same_vocabulary(policy_tokenizer, reward_tokenizer, reward_path: str) -> None:
    if policy_tokenizer.get_vocab() != reward_tokenizer.get_vocab():
        raise ValueError(f"reward model {reward_path}: its tokenizer differs from the policy's; the RM must score "
                         "the policy's token ids (train it from the same SFT model)")


@torch.no_grad()
def score_policy(policy_path: str, reward_path: str, prompts: Sequence[str], temperature: float = 0.8,
                 max_new_tokens: int = 512, batch_size: int = 16, seed: int = 1234, *, top_k: int = 50,
                 top_p: float = 1.0, max_prompt_len: int = 512, dtype: str = "fp32",
                 device: Optional[str] = None, progress: Optional[str] = None) -> List[Dict]:
    """One sampled response per prompt from ``policy_path`` (a model directory or a step-3 run directory, see
    :func:`~dschat.model.policy_model_dir`), scored by the reward model at ``reward_path``.

    ``temperature`` 0 decodes greedily. Prompts longer than ``max_prompt_len`` tokens are skipped (and logged).
    Sampling is seeded by ``seed`` without touching the caller's global RNG. Returns one record per scored
    prompt: ``index`` (position in ``prompts``), ``prompt``, ``response``, ``score``, ``response_tokens``
    (EOS included) and ``finished`` (the response ended with EOS within ``max_new_tokens``). ``progress``: the
    label of a progress bar over the prompts (None: no bar).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    policy_path = policy_model_dir(policy_path)
    tokenizer = load_tokenizer(policy_path, padding_side="left")
    _check_same_vocabulary(tokenizer, load_tokenizer(reward_path), reward_path)
    policy = load_causal_lm(policy_path, tokenizer, dtype).to(device).eval()
    reward_model = load_reward_model(reward_path, tokenizer, dtype, require_head=True).to(device).eval()
    dataset = PromptDataset(list(prompts), tokenizer, max_prompt_len)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size,
                                         collate_fn=PromptCollator.for_tokenizer(tokenizer))
    sampling = ({"do_sample": True, "temperature": temperature, "top_k": top_k, "top_p": top_p} if temperature > 0
                else {"do_sample": False})
    records = []
    with seeded_rng(seed):
        bar = tqdm(total=len(dataset), desc=progress, unit="prompt", disable=progress is None)
        for batch in loader:
            prompt_ids = batch["input_ids"].to(device)
            prompt_mask = batch["attention_mask"].to(device)
            seq = policy.generate(input_ids=prompt_ids, attention_mask=prompt_mask, max_new_tokens=max_new_tokens,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                  use_cache=True, **sampling)
            attention_mask, action_mask = rollout_masks(seq, prompt_mask, tokenizer.eos_token_id)
            scores = sequence_scores(reward_model, seq, attention_mask).float().cpu()
            finished = ((seq[:, 1:] == tokenizer.eos_token_id) & action_mask.bool()).any(dim=1).cpu()
            responses = decode_responses(tokenizer, seq, action_mask)
            for row, index in enumerate(batch["index"].tolist()):
                records.append({"index": index, "prompt": prompts[index], "response": responses[row],
                                "score": scores[row].item(), "response_tokens": int(action_mask[row].sum()),
                                "finished": bool(finished[row])})
            bar.update(len(batch["index"]))
        bar.close()
    return records


def summarize_scores(records: Sequence[Dict]) -> Dict[str, float]:
    """``count``, ``score_mean``, ``score_std`` (population std, as step 3 logs ``eval/score_std``),
    ``response_tokens_mean`` and ``finished_fraction`` of :func:`score_policy` records."""
    if not records:
        raise ValueError("no scored responses to summarise (every prompt was skipped?)")
    scores = torch.tensor([record["score"] for record in records], dtype=torch.float64)
    return {"count": len(records), "score_mean": scores.mean().item(),
            "score_std": scores.std(correction=0).item(),
            "response_tokens_mean": sum(r["response_tokens"] for r in records) / len(records),
            "finished_fraction": sum(r["finished"] for r in records) / len(records)}


def write_jsonl(records: Sequence[Dict], path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def named_policy(text: str) -> tuple:
    """``--policy NAME=PATH`` (or just ``PATH``, named after its directory) as ``(name, path)``."""
    name, separator, path = text.partition("=")
    if not separator:
        path = text
        name = os.path.basename(os.path.normpath(text))
    if not name or not path:
        raise argparse.ArgumentTypeError(f"--policy {text!r}: expected NAME=PATH or PATH")
    return name, path


def table_lines(summaries: Dict[str, Dict[str, float]]) -> List[str]:
    """A Markdown table: one row per policy with its RM score mean ± std and the number of prompts."""
    lines = ["| Method | RM score (mean ± std) | n | response tokens |", "|---|---|---|---|"]
    for name, summary in summaries.items():
        lines.append(f"| {name} | {summary['score_mean']:.3f} ± {summary['score_std']:.3f} | {summary['count']} "
                     f"| {summary['response_tokens_mean']:.1f} |")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--policy", type=named_policy, action="append", required=True,
                        help="NAME=PATH of a policy: a model directory (HF format) or a step-3 output directory "
                        "(its actor/); repeat for several")
    parser.add_argument("--reward_model", required=True, help="reward model checkpoint (step 2 output)")
    parser.add_argument("--data_name", default="synthetic")
    parser.add_argument("--data_path", default=None)
    parser.add_argument("--eval_data_path", default=None)
    parser.add_argument("--max_eval_samples", type=int, default=0, help="0 = the whole held-out split")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    parser.add_argument("--top_k", type=int, default=50)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--max_new_tokens", type=int, default=512)
    parser.add_argument("--max_prompt_len", type=int, default=512)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--output_dir", required=True, help="writes NAME.jsonl per policy and summary.json")
    parser.add_argument("--no_progress_bar", action="store_true")
    return parser


def check_paths(args: argparse.Namespace) -> None:
    """Every policy and the reward model name an existing checkpoint (or a hub id / offline name), before any
    model loads: a missing directory is one line naming it."""
    for name, path in args.policy:
        try:
            check_model_name(policy_model_dir(path))
        except ConfigError as err:
            raise ConfigError(f"--policy {name}={path}: {err}") from None
    try:
        check_model_name(args.reward_model)
    except ConfigError as err:
        raise ConfigError(f"--reward_model {err}") from None


def main(argv=None) -> Dict[str, Dict[str, float]]:
    args = build_parser().parse_args(argv)
    check_paths(args)
    prompts = validation_prompts(args.data_name, args.data_path, args.eval_data_path, args.max_eval_samples)
    summaries = {}
    for name, path in args.policy:
        records = score_policy(path, args.reward_model, prompts, args.temperature, args.max_new_tokens,
                               args.batch_size, args.seed, top_k=args.top_k, top_p=args.top_p,
                               max_prompt_len=args.max_prompt_len, dtype=args.dtype,
                               progress=None if args.no_progress_bar else name)
        write_jsonl(records, os.path.join(args.output_dir, f"{name}.jsonl"))
        summaries[name] = {"policy": path, **summarize_scores(records)}
        print(f"{name}: RM score {summaries[name]['score_mean']:.3f} ± {summaries[name]['score_std']:.3f} "
              f"(n={summaries[name]['count']})", flush=True)
    with open(os.path.join(args.output_dir, "summary.json"), "w") as handle:
        json.dump({"reward_model": args.reward_model, "temperature": args.temperature, "seed": args.seed,
                   "policies": summaries}, handle, indent=2)
    print("\n".join(table_lines(summaries)))
    return summaries


if __name__ == "__main__":
    run_cli(main)
