"""Does a saved reward model rank held-out pairs the same outside this project? Scores every pair's chosen and
rejected ``prompt + response`` under several loaders' conventions and reports each one's ranking accuracy and its
agreement with the project's own scoring (step 2's evaluation, step 3's reward):

    python -m evaluation.rm_interop --reward_model outputs/demo/rm --data_name synthetic --num_pairs 200

Conventions (each reads the checkpoint with ``AutoTokenizer`` / ``AutoModelForSequenceClassification`` only):

* ``plain``: ``tok(prompt + response, return_tensors="pt")`` one at a time;
* ``plain_right`` / ``plain_left``: the same batched, ``tok(texts, padding=True)`` with each padding side;
* ``trl_get_reward``: TRL's ``get_reward`` (trl/experimental/utils.py, used by its PPO/RLOO trainers): query =
  ``[bos] + prompt`` left-padded, the response with its eos after it, right-padded; the score is read before
  the first pad after the query;
* ``trl_grpo_chat``: TRL's ``GRPOTrainer`` reward-model call on conversational data: the chat template over
  ``[user: prompt, assistant: response]``, tokenized with ``add_special_tokens=False``, right padding;
* ``trl_grpo_text``: the same call on plain-text data (``prompt + response``, ``add_special_tokens=False``):
  no bos and no eos reach the model, so an RM scored at the eos (ours, TRL's RewardTrainer's) is misread;
* ``trl_grpo_text_function``: plain-text GRPO with the model handed over as a reward *function*,
  ``reward_funcs=[text_reward_function(path)]`` (``dschat.model``), which calls the tokenizer plainly;
* ``trl_reward_trainer_text``: TRL's ``RewardTrainer`` preprocessing of plain text (``prompt + response +
  eos_token`` as text, then a plain call): the tokenizer's eos follows the text's, so the sequence ends in two.
"""
from __future__ import annotations

import json
from typing import Callable, Dict, List, Sequence, Tuple

import torch

from dschat.data import PairCollator, PairDataset, PreferencePair, load_pairs
from dschat.model import load_reward_model, load_tokenizer, sequence_scores, text_reward_function
from dschat.core.entrypoint import ArgumentParser

Scores = Tuple[torch.Tensor, torch.Tensor]


def _batches(items: Sequence, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


@torch.no_grad()
def project_scores(reward_path: str, pairs: Sequence[PreferencePair], max_seq_len: int = 512,
                   batch_size: int = 32) -> Scores:
    """(chosen, rejected) rewards as step 2 evaluates them (``PairDataset`` + ``sequence_scores``)."""
    tokenizer = load_tokenizer(reward_path)
    model = load_reward_model(reward_path, tokenizer, require_head=True).eval()
    dataset = PairDataset(list(pairs), tokenizer, max_seq_len)
    if len(dataset) != len(pairs):
        raise ValueError(f"{len(pairs) - len(dataset)} pairs are longer than max_seq_len={max_seq_len}")
    collate = PairCollator.for_tokenizer(tokenizer)
    chosen, rejected = [], []
    for rows in _batches([dataset[i] for i in range(len(dataset))], batch_size):
        batch = collate(rows)
        scores = sequence_scores(model, batch["input_ids"], batch["attention_mask"])
        chosen.append(scores[:len(rows)])
        rejected.append(scores[len(rows):])
    return torch.cat(chosen), torch.cat(rejected)


def _plain(model, tokenizer, texts: List[str], padding_side: str, batch_size: int) -> torch.Tensor:
    if padding_side == "none":
        return torch.stack([model(**tokenizer(text, return_tensors="pt")).logits[0, 0] for text in texts])
    tokenizer.padding_side = padding_side
    return torch.cat([model(**tokenizer(chunk, padding=True, return_tensors="pt")).logits[:, 0]
                      for chunk in _batches(texts, batch_size)])


def _trl_get_reward(model, tokenizer, pairs: List[Tuple[str, str]], batch_size: int) -> torch.Tensor:
    """TRL's ``get_reward`` on ``query + response`` token ids (its code, restated)."""
    pad = tokenizer.pad_token_id
    prefix = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    scores = []
    for chunk in _batches(pairs, batch_size):
        full = [tokenizer(p + r, add_special_tokens=False)["input_ids"] for p, r in chunk]
        prompt_lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p, _ in chunk]
        queries = [prefix + ids[:n] for ids, n in zip(full, prompt_lengths)]
        responses = [ids[n:] + [tokenizer.eos_token_id] for ids, n in zip(full, prompt_lengths)]
        context = max(map(len, queries))
        width = context + max(map(len, responses))
        query_responses = torch.tensor([[pad] * (context - len(q)) + q + r + [pad] * (width - context - len(r))
                                        for q, r in zip(queries, responses)])
        attention_mask = query_responses != pad
        position_ids = attention_mask.cumsum(1) - attention_mask.long()
        backbone = getattr(model, model.base_model_prefix)
        hidden = backbone(input_ids=torch.masked_fill(query_responses, ~attention_mask, 0),
                          attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
                          output_hidden_states=True, return_dict=True).hidden_states[-1]
        logits = model.score(hidden)
        is_pad = query_responses[:, context:] == pad
        first_pad = torch.where(is_pad.any(1), is_pad.float().argmax(1), torch.tensor(is_pad.shape[1]))
        scores.append(logits[torch.arange(len(chunk)), first_pad - 1 + context].squeeze(-1))
    return torch.cat(scores)


def _trl_grpo(model, tokenizer, texts: List[str], batch_size: int) -> torch.Tensor:
    """TRL's ``GRPOTrainer`` reward-model call: ``add_special_tokens=False``, right padding, ``logits[:, 0]``."""
    return torch.cat([model(**tokenizer(text=chunk, return_tensors="pt", padding=True, padding_side="right",
                                        add_special_tokens=False)).logits[:, 0]
                      for chunk in _batches(texts, batch_size)])


def _chat_texts(tokenizer, rows: List[Tuple[str, str]]) -> List[str]:
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": r}],
                                          tokenize=False) for p, r in rows]


CONVENTIONS: Dict[str, Callable] = {
    "plain": lambda model, tok, rows, size: _plain(model, tok, [p + r for p, r in rows], "none", size),
    "plain_right": lambda model, tok, rows, size: _plain(model, tok, [p + r for p, r in rows], "right", size),
    "plain_left": lambda model, tok, rows, size: _plain(model, tok, [p + r for p, r in rows], "left", size),
    "trl_get_reward": _trl_get_reward,
    "trl_grpo_chat": lambda model, tok, rows, size: _trl_grpo(model, tok, _chat_texts(tok, rows), size),
    "trl_grpo_text": lambda model, tok, rows, size: _trl_grpo(model, tok, [p + r for p, r in rows], size),
    "trl_grpo_text_function": lambda model, tok, rows, size: torch.tensor(
        text_reward_function(model.name_or_path, size)([p for p, _ in rows], [r for _, r in rows])),
    "trl_reward_trainer_text": lambda model, tok, rows, size: _plain(
        model, tok, [p + r + tok.eos_token for p, r in rows], "none", size),
}
"""Name -> ``score(model, tokenizer, [(prompt, response)], batch_size)``, see the module docstring."""


@torch.no_grad()
def convention_scores(reward_path: str, pairs: Sequence[PreferencePair], convention: str,
                      batch_size: int = 32) -> Scores:
    """(chosen, rejected) rewards of ``pairs`` under ``convention`` (see the module docstring), loading the
    checkpoint with ``transformers``' auto classes only."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: expected one of {sorted(CONVENTIONS)}")
    tokenizer = AutoTokenizer.from_pretrained(reward_path)
    model = AutoModelForSequenceClassification.from_pretrained(reward_path).eval()
    score = CONVENTIONS[convention]
    return (score(model, tokenizer, [(pair.prompt, pair.chosen) for pair in pairs], batch_size),
            score(model, tokenizer, [(pair.prompt, pair.rejected) for pair in pairs], batch_size))


def ranking_report(reward_path: str, pairs: Sequence[PreferencePair], conventions: Sequence[str] = tuple(CONVENTIONS),
                   max_seq_len: int = 512) -> Dict[str, Dict[str, float]]:
    """Per convention (and ``project``): ``accuracy`` (chosen scored above rejected), ``agreement`` (the same
    decision as the project on a pair) and ``max_abs_diff`` of the scores from the project's."""
    reference = project_scores(reward_path, pairs, max_seq_len)
    reference_wins = reference[0] > reference[1]
    report = {}
    for name in ("project", *conventions):
        chosen, rejected = reference if name == "project" else convention_scores(reward_path, pairs, name)
        wins = chosen > rejected
        report[name] = {"accuracy": wins.float().mean().item(),
                        "agreement": (wins == reference_wins).float().mean().item(),
                        "max_abs_diff": max((chosen - reference[0]).abs().max().item(),
                                            (rejected - reference[1]).abs().max().item())}
    return report


def main(argv=None) -> Dict[str, Dict[str, float]]:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--reward_model", required=True, help="reward model directory (step 2 output)")
    parser.add_argument("--data_name", default="synthetic")
    parser.add_argument("--data_path", default=None)
    parser.add_argument("--num_pairs", type=int, default=200, help="the first N held-out pairs")
    parser.add_argument("--max_seq_len", type=int, default=512)
    args = parser.parse_args(argv)
    pairs = [pair for pair in load_pairs(args.data_name, split="validation", data_path=args.data_path)
             if pair.rejected is not None][:args.num_pairs]
    report = ranking_report(args.reward_model, pairs, max_seq_len=args.max_seq_len)
    print(f"{len(pairs)} held-out pairs, {args.reward_model}")
    print(f"{'convention':<26}{'accuracy':>10}{'agreement':>11}{'max |Δscore|':>14}")
    for name, row in report.items():
        print(f"{name:<26}{row['accuracy']:>10.3f}{row['agreement']:>11.3f}{row['max_abs_diff']:>14.2e}")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    from dschat.core.entrypoint import run_cli

    run_cli(main)
