"""Partial rollouts (``--partial_rollout``): responses sampled by more than one policy version.

Without it, a producer samples a whole rollout with the version it holds when the rollout starts. With it, the
producer decodes in chunks of ``--partial_rollout_chunk`` tokens and, between two chunks, loads any newer version
the trainer has pushed, then continues the responses in flight with it — a weight update need not wait for the
longest response (AReaL's partial rollouts, Fu et al. 2025 §4; veRL's fully asynchronous mode; NeMo RL's in-flight
weight updates; ``../shared/reference/async-rollouts.md``). Both engines share the loop (:func:`sample_in_chunks`):
each chunk is one call of the engine on the prompt and the tokens so far as its prompt, so every token after a
switch is drawn from the new version given the whole prefix, exactly. The hf engine prefills that prefix under the
new weights (NeMo RL's KV-cache recomputation). The vLLM engine is "aborted and resumed" at chunk granularity: a
request of at most ``chunk`` tokens, then a new one whose prompt token ids are the prompt and the tokens so far
(what vLLM 0.32's ``pause_generation(mode="abort")`` and a resubmission do to a server's requests, done in process
between two ``generate`` calls). Loading a version resets vLLM's prefix cache, so no key or value computed by the
old weights is reused; within a version the prefix cache spares the re-prefill. Each chunk draws its rows'
sampling seeds afresh from torch's generator (seeded per rollout by the producer): a resumed request under its
first chunk's seed would replay that chunk's noise, position for position.

**Per-token versions.** Each response token carries the version v_t that sampled it (``Rollout.token_versions``)
and its behaviour log-prob log π_{v_t}(a_t | s_t): vLLM's own log-prob of the token, computed by the version that
sampled it (in the trainer's convention, :func:`.vllm_engine._untruncated_logprobs`); with the hf engine a forward
of version v_t over the sequence so far, taken just before the next version is loaded (one forward per version a
rollout sees). Rollout i is started no earlier than version i − K (the wait schedule, :mod:`.producer`), so every
token is at most K versions old when trained on; the trainer checks it per token (:func:`stale_token`), not per
response.

**The correction** (:mod:`dschat.rlhf.macro_action.correction`) then weighs each token by its own behaviour
policy: w_t = π_prox(a_t|s_t) / π_{v_t}(a_t|s_t), and a macro action ω_τ spanning two versions takes the product
of its tokens' own ratios, w_τ = min(Π_{t∈ω_τ} π_prox(a_t|s_t) / π_{v_t}(a_t|s_t), C) — the ratio of the
macro's probability under π_prox to its probability under the mixture of versions that actually sampled it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional, Tuple

import torch

from dschat.rlhf.experience import gather_logprobs, position_ids, rollout_masks, token_entropy

from .base import Rollout, RolloutEngine


def score_positions(model: torch.nn.Module, seq: torch.Tensor, prompt_mask: torch.Tensor, eos_token_id: int,
                    logprob_temperature: float, entropy_temperature: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs, entropies)`` ``[B, T-1]`` of ``seq = [prompt | tokens so far]`` under ``model`` in the
    trainer's convention (log_softmax(logits / T) before top-k / top-p; the entropy at the sampling temperature,
    as :class:`~dschat.rlhf.experience.EntropyRecorder` records it), from one forward."""
    attention_mask, _ = rollout_masks(seq, prompt_mask, eos_token_id)
    logits = model(input_ids=seq, attention_mask=attention_mask, position_ids=position_ids(attention_mask),
                   use_cache=False).logits[:, :-1]
    return gather_logprobs(logits, seq[:, 1:], logprob_temperature), token_entropy(logits, entropy_temperature)


@torch.no_grad()
def sample_in_chunks(engine: RolloutEngine, model: torch.nn.Module, prompts: torch.Tensor, prompt_mask: torch.Tensor,
                     sampling, chunk: int, version: int, between_chunks: Callable[[Callable[[], None]], int],
                     pad_token_id: int, eos_token_id: int, logprob_temperature: float) -> Rollout:
    """A rollout decoded ``chunk`` tokens at a time by ``engine`` (module docstring), ``model`` (the weights the
    engine samples with, or loads them from) at ``version``. Each chunk is one ``engine.generate`` call on the
    prompt and the tokens so far, so an engine marked stale loads the version just taken in first. After every
    chunk but the last, ``between_chunks(score)`` loads any newer version into ``model`` and returns the version
    it then holds, calling ``score()`` first if it loads one (the tokens of the version being replaced that the
    engine gave no log-probs for are scored while its weights are still there). Rows that have stopped (eos) are
    not decoded further. Returns the :class:`.Rollout` with ``engine_logprobs`` of each token under its own
    version (0 off the response), ``entropy`` where a forward scored them (else None) and ``token_versions``
    ``[B, max_new_tokens]``."""
    rows, prompt_len = prompts.shape
    total = sampling.max_new_tokens
    seq = torch.full((rows, prompt_len + total), pad_token_id, dtype=prompts.dtype, device=prompts.device)
    seq[:, :prompt_len] = prompts
    versions = torch.full((rows, total), version, dtype=torch.long, device=prompts.device)
    logprobs = torch.zeros(rows, prompt_len + total - 1, device=prompts.device)
    entropy = None
    stopped = torch.zeros(rows, dtype=torch.bool, device=prompts.device)
    done, scored = 0, 0

    def score() -> None:
        nonlocal scored, entropy
        if scored == done:
            return
        end = prompt_len + done
        segment = slice(prompt_len - 1 + scored, end - 1)
        lp, ent = score_positions(model, seq[:, :end], prompt_mask, eos_token_id, logprob_temperature,
                                  sampling.temperature)
        entropy = torch.zeros_like(logprobs) if entropy is None else entropy
        logprobs[:, segment], entropy[:, segment] = lp[:, segment], ent[:, segment]
        scored = done

    while done < total and not bool(stopped.all()):
        active = (~stopped).nonzero().flatten()
        step = min(chunk, total - done)
        context = seq[active, :prompt_len + done]
        mask = torch.cat([prompt_mask[active], torch.ones_like(context[:, prompt_len:])], dim=1)
        out = engine.generate(context, mask, dataclasses.replace(sampling, max_new_tokens=step))
        new = out.seq[:, prompt_len + done:].to(seq.device)
        seq[active, prompt_len + done:prompt_len + done + step] = new
        versions[active, done:done + step] = version
        if out.engine_logprobs is not None:  # the engine's own, from the version that sampled them
            positions = slice(prompt_len - 1 + done, prompt_len - 1 + done + step)
            logprobs[active, positions] = out.engine_logprobs[:, positions].to(logprobs.device)
        stopped[active] = (new == eos_token_id).any(dim=1)
        done += step
        if out.engine_logprobs is not None:
            scored = done
        if done < total and not bool(stopped.all()):
            version = between_chunks(score)
    score()
    _, action_mask = rollout_masks(seq, prompt_mask, eos_token_id)
    return Rollout(seq, entropy=None if entropy is None else entropy * action_mask,
                   engine_logprobs=logprobs * action_mask, token_versions=versions)


def response_tokens(seq: torch.Tensor, prompt_len: int, eos_token_id: int) -> torch.Tensor:
    """``[B, max_new_tokens]`` bool: which generated positions of ``seq`` are response tokens (up to eos)."""
    prompt_mask = torch.ones(seq.shape[0], prompt_len, dtype=torch.long, device=seq.device)
    return rollout_masks(seq, prompt_mask, eos_token_id)[1][:, prompt_len - 1:].bool()


def stale_token(trained_version: int, versions: torch.Tensor, on: torch.Tensor, bound: int
                ) -> Optional[Tuple[int, int, int]]:
    """The first response token (``on``) sampled more than ``bound`` versions before ``trained_version``, as
    ``(row, position, its version)``; None when every token is within the bound. Per token: a response whose
    newest tokens are fresh may still hold an old one."""
    too_old = on & (trained_version - versions.to(on.device) > bound)
    if not bool(too_old.any()):
        return None
    row, position = (int(i) for i in too_old.nonzero()[0])
    return row, position, int(versions[row, position])


def version_stats(trained_version: int, versions: torch.Tensor, on: torch.Tensor) -> Dict[str, float]:
    """Per-token staleness (``rollout/staleness_mean`` over response tokens, ``_max``) and, of a rollout's
    responses, how many versions sampled them: the fraction of responses and of response tokens in responses
    sampled by more than one version, and the spread (newest − oldest version) per response, mean and max."""
    versions = versions.to(on.device)
    staleness = (trained_version - versions)[on].double()
    big, small = torch.iinfo(torch.long).max, torch.iinfo(torch.long).min
    spread = (torch.where(on, versions, small).max(dim=1).values
              - torch.where(on, versions, big).min(dim=1).values).clamp(min=0)
    several = spread > 0
    tokens = on.sum(dim=1)
    return {"rollout/staleness_mean": float(staleness.mean()), "rollout/staleness_max": float(staleness.max()),
            "rollout/multi_version_responses": float(several.double().mean()),
            "rollout/multi_version_tokens": float(tokens[several].sum() / tokens.sum().clamp(min=1)),
            "rollout/version_spread_mean": float(spread.double().mean()),
            "rollout/version_spread_max": float(spread.max())}
