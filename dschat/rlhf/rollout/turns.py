"""How an episode's text becomes tokens, each piece tokenised exactly once (token-in-token-out).

An episode's token sequence is ``[prompt | reply 1 | observation 1 | reply 2 | ...]``: the replies are the tokens the
policy sampled, kept as sampled (never decoded and re-encoded: re-tokenising a conversation between turns changes
the tokens trained on, TRL #5224, veRL #6719, NeMo Gym #1416); each observation is tokenised once, on its own, and
appended. The chat template is applied once per turn:

- ``chat`` (a tokenizer with its own chat template, e.g. SmolLM2-Instruct's ChatML): the prompt is the template of
  the first observation as a user message with the generation prompt; each later observation is the text the
  template writes between the end of an assistant message and the next generation prompt (the user message and the
  assistant header), without the end-of-turn token the policy sampled itself (its eos);
- ``plain`` (the project's own layout, the tiny tokenizer): the observation followed by a newline, nothing else.
"""
from __future__ import annotations

from typing import List

from dschat.data.tokenized import LAYOUT_CHAT_TEMPLATE

MARKER = "\ue000"
"""A private-use character no template writes: it stands for an assistant message whose end the template marks."""


def uses_chat_template(tokenizer) -> bool:
    """Whether ``tokenizer`` has a chat template of its own (not the project's plain layout)."""
    template = getattr(tokenizer, "chat_template", None)
    return bool(template) and template != LAYOUT_CHAT_TEMPLATE


def prompt_text(tokenizer, observation: str) -> str:
    """The text of an episode's prompt for its first ``observation``, as the prompt dataset tokenises it (after
    its ``[bos]``, so a template's leading bos text is dropped here rather than written twice)."""
    if not uses_chat_template(tokenizer):
        return observation + "\n"
    text = tokenizer.apply_chat_template([{"role": "user", "content": observation}], add_generation_prompt=True,
                                         tokenize=False)
    bos = tokenizer.bos_token
    return text[len(bos):] if bos and text.startswith(bos) else text


def observation_text(tokenizer, observation: str) -> str:
    """The text appended after a reply for a later ``observation`` (module docstring)."""
    if not uses_chat_template(tokenizer):
        return observation + "\n"
    turns = [{"role": "user", "content": MARKER}, {"role": "assistant", "content": MARKER},
             {"role": "user", "content": observation}]
    text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
    after = text[text.rindex(MARKER) + len(MARKER):]
    eos = tokenizer.eos_token
    return after[len(eos):] if eos and after.startswith(eos) else after


def observation_ids(tokenizer, observation: str) -> List[int]:
    """The token ids appended for a later ``observation``: :func:`observation_text`, tokenised once."""
    return tokenizer(observation_text(tokenizer, observation), add_special_tokens=False)["input_ids"]
