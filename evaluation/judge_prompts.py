"""The pairwise judge prompts of the paper's Appendix F.1 ("GPT-4 Evaluation Prompts"), one per task, their
single-character variants for small judges whose first output token is constrained to A / B / E, and the
single-character follow-up asked after a free answer to the F.1 prompt.

Three answer styles (Appendix F.1):

- ``single_char`` (TL;DR): one character, 'A', 'B' or 'E', judged on relevance, coherence, consistency and
  fluency together;
- ``json_choice`` (HH-RLHF): a one-sentence comparison, then the choice, as JSON with keys "comparison" and
  "choice";
- ``json_criteria`` (WebGPT Comparisons): JSON mapping each criterion (factual accuracy, coherence, usefulness
  overall) to 'A', 'B' or 'E'.

The F.1 text is kept verbatim (typos included) so that win rates are comparable with the paper's Fig. 4 / 17.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

SINGLE_CHAR = "single_char"
JSON_CHOICE = "json_choice"
JSON_CRITERIA = "json_criteria"

TLDR_PROMPT = """You will be given two summaries written for an article. Your task is to pick the better one between them, based on the four criteria. Please make sure you read and understand these instructions carefully.

Relevance - selection of important content from the source. The summary should include only important information from the source document. Annotators were instructed to penalize summaries which contained redundancies and excess information.

Coherence - the collective quality of all sentences. We align this dimension with the DUC quality question of structure and coherence whereby "the summary should be well-structured and well-organized. The summary should not just be a heap of related information, but should build from sentence to a coherent body of information about a topic."

Consistency - the factual alignment between the summary and the summarized source. A factually consistent summary contains only statements that are entailed by the source document. Annotators were also asked to penalize summaries that contained hallucinated facts.

Fluency - the quality of the summary in terms of grammar, spelling, punctuation, word choice, and sentence structure.

You should output single character to indicate which summary you think is better. 'A' stands for Summary A and 'B' stands for Summary B. If you think both summaries are equally good, output 'E'.

Article / Post:{prompt}
Summary A:{response_a}
Summary B:{response_b}
Your Choice (only a single character):"""

HH_RLHF_PROMPT = """For the following query to a chatbot assistant, which response is more helpful?
First provide a one-sentence comparison of the two responses and explain which you feel is more helpful. Second, on a new line, state only 'A' or 'B' to indicate which response is more helpful. If they are equally good or bad, state 'E'. Your response should use the json format, with "comparison" and "choice" as keys.
Query: {prompt}
Response A: {response_a}
Response B: {response_b}
Your Judgment:"""

HH_RLHF_SINGLE_CHAR_PROMPT = """For the following query to a chatbot assistant, which response is more helpful?
State only 'A' or 'B' to indicate which response is more helpful. If they are equally good or bad, state 'E'.
Query: {prompt}
Response A: {response_a}
Response B: {response_b}
Your Choice (only a single character):"""

WEBGPT_CRITERIA_TEXT = """**Factual accuracy** - which answer is more factually accurate?
**Coherence** - which answer is easier to follow?
**Usefulness overall** - all things considered, which answer would be more helpful to the person who asked this question?"""

WEBGPT_PROMPT = """You will be given two response written for an question. Your task is to pick the better one between them, based on these criteria.
""" + WEBGPT_CRITERIA_TEXT + """
You should output with a json format where the key is the criteria and the value is the choice you made, using 'A' stands for Response A and 'B' stands for Response B. If you think both responses are equally good, output 'E'.
Question: {prompt}
Answer A: {response_a}
Answer B: {response_b}
Your Judgment (you should also output the reason, note that you are allowed to think both responses are equally good, then output with 'E'):"""

WEBGPT_SINGLE_CHAR_PROMPT = """You will be given two response written for an question. Your task is to pick the better one between them, based on this criterion.
{criterion_text}
You should output single character to indicate your choice. 'A' stands for Answer A and 'B' stands for Answer B. If you think both answers are equally good, output 'E'.
Question: {prompt}
Answer A: {response_a}
Answer B: {response_b}
Your Choice for {criterion} (only a single character):"""

FOLLOW_UP_PROMPT = "Your Choice for {criterion} (only a single character):"
"""The question read with a constrained first token after the judge's free answer to the F.1 prompt
(``--reason_first``): the last line of the single-character prompts."""


@dataclass(frozen=True)
class JudgeTask:
    """One task's judge protocol: the F.1 prompt, its answer style and the criteria it reports.

    ``headline`` is the criterion reported as the task's win rate (Fig. 4): the only one for TL;DR and HH-RLHF,
    "usefulness overall" for WebGPT (whose Fig. 4 panel also shows the other two)."""

    name: str
    prompt: str
    style: str
    criteria: Tuple[str, ...]
    headline: str


TASKS = {
    "tldr": JudgeTask("tldr", TLDR_PROMPT, SINGLE_CHAR, ("overall",), "overall"),
    "hh-rlhf": JudgeTask("hh-rlhf", HH_RLHF_PROMPT, JSON_CHOICE, ("helpfulness",), "helpfulness"),
    "webgpt": JudgeTask("webgpt", WEBGPT_PROMPT, JSON_CRITERIA,
                        ("factual accuracy", "coherence", "usefulness overall"), "usefulness overall"),
}


def get_task(name: str) -> JudgeTask:
    if name not in TASKS:
        raise ValueError(f"unknown judge task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def render(task: JudgeTask, prompt: str, response_a: str, response_b: str) -> str:
    """The F.1 prompt of ``task`` with the query and the two responses in presentation order."""
    return task.prompt.format(prompt=prompt, response_a=response_a, response_b=response_b)


def _webgpt_criterion_line(criterion: str) -> str:
    key = criterion.split()[0].lower()
    return next(line for line in WEBGPT_CRITERIA_TEXT.splitlines() if line.lower().startswith(f"**{key}"))


def render_single_char(task: JudgeTask, criterion: str, prompt: str, response_a: str, response_b: str) -> str:
    """The prompt asking for one character about one criterion, for constrained small judges: F.1's TL;DR
    prompt unchanged; HH-RLHF's without the comparison sentence and JSON; WebGPT's once per criterion."""
    if task.style == SINGLE_CHAR:
        return render(task, prompt, response_a, response_b)
    if task.style == JSON_CHOICE:
        return HH_RLHF_SINGLE_CHAR_PROMPT.format(prompt=prompt, response_a=response_a, response_b=response_b)
    return WEBGPT_SINGLE_CHAR_PROMPT.format(criterion_text=_webgpt_criterion_line(criterion), criterion=criterion,
                                            prompt=prompt, response_a=response_a, response_b=response_b)


def render_follow_up(criterion: str) -> str:
    """The follow-up question about ``criterion`` asked after the judge's own answer to the F.1 prompt."""
    return FOLLOW_UP_PROMPT.format(criterion=criterion)
