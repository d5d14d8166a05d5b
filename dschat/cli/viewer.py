"""Segmentation viewer: print a text cut into macro actions by any registered termination rule (paper §3.2.1,
Appendix B.4), with ``@@`` after each macro as in the review discussion's examples::

    python -m dschat.cli.viewer --termination parsing --parser spacy \\
        --text "20M, moved to Europe, met some people but they quickly disappeared."
    python -m dschat.cli.viewer --termination parsing --parser code --file solution.py
    python -m dschat.cli.viewer --termination fixed --ngram 5 --file answer.txt
    python -m dschat.cli.viewer --termination randomized --random_lengths 2 3 5 --text "..."
    python -m dschat.cli.viewer --termination ppl --model smollm2-135m-instruct --text "..."
    python -m dschat.cli.viewer --termination entropy --model tiny-gemma --text "..."

The rule's options are step 3's own flag definitions (``TerminationConfig``: ``--termination``, ``--ngram``,
``--random_lengths``, ``--random_repeat``, ``--parser``, ``--parser_cutoff``, ``--entropy_quantile``,
``--entropy_threshold``; and ``--seed``, ``--temperature``: same spelling, checks and defaults), turned into rule
options by the same ``TerminationConfig.termination_options``, so a cut seen here is the cut step 3 makes on its
first process.
The whole text is treated as one response of the policy tokenizer: ``--tokenizer``, else the tokenizer of
``--model``, else the shipped ``dschat/assets/tokenizer``. Rules are looked up in the registry only, so every
registered rule works here. ``ppl`` and ``entropy`` need a language model: ``--model`` (a Hugging Face causal-LM
directory or hub id, or an offline name: ``tiny-gemma``, ``smollm2-135m-instruct``) scores the text, the first
token conditioned on the tokenizer's BOS (or EOS) token: log-probabilities for ``ppl``, and for ``entropy`` the
entropy of softmax(logits / --temperature) at each token (what step 3 records while sampling).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch

from dschat.rlhf.macro_action.parsers.alignment import text_decoder, token_pieces
from dschat.rlhf.macro_action.termination import SegmentationBatch, TerminationOptions, build_termination
from dschat.stages.configs import SamplingArgs, SeedArgs, TerminationConfig
from dschat.core.config import add_flag, flag_specs, select
from dschat.core.entrypoint import ArgumentParser

DEFAULT_TOKENIZER = Path(__file__).resolve().parents[1] / "assets" / "tokenizer"
SEPARATOR = "@@"


class ViewerError(Exception):
    """A user error reported as one line."""


MODEL_RULES = ("ppl", "entropy")
"""Rules that read a language model's view of the text."""


def build_arg_parser() -> argparse.ArgumentParser:
    """The rule's flags are step 3's own (:class:`TerminationConfig`, ``--seed`` and ``--temperature``: same
    spelling, types, checks and defaults); the rest are the viewer's."""
    parser = ArgumentParser(
        prog="python -m dschat.cli.viewer", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print a text cut into macro actions by a termination rule ('@@' after each macro).")
    rule = parser.add_argument_group("termination rule (as in step 3)")
    temperature = [spec for spec in flag_specs(SamplingArgs) if spec.name == "temperature"]
    for spec in [*flag_specs(TerminationConfig), *flag_specs(SeedArgs), *temperature]:
        add_flag(rule, spec)
    parser.add_argument("--tokenizer", default=None,
                        help="policy tokenizer path (default: --model's, else dschat/assets/tokenizer)")
    parser.add_argument("--model", default=None,
                        help="causal LM that scores the text (needed by ppl): a directory, a hub id, tiny-gemma or "
                             "smollm2-135m-instruct (default: none)")
    parser.add_argument("--sep", default=SEPARATOR, help=f"text printed after each macro (default: {SEPARATOR})")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to segment")
    source.add_argument("--file", type=Path, help="a file holding the text to segment")
    return parser


def load_tokenizer(path: Optional[str], model: Optional[str] = None):
    """The tokenizer at ``path``, else ``model``'s, else the shipped one; ViewerError if there is none."""
    if path is None and model is not None:
        from dschat.model import load_tokenizer as model_tokenizer

        return model_tokenizer(model)
    if path is None:
        if not DEFAULT_TOKENIZER.is_dir():
            raise ViewerError(f"no tokenizer: pass --tokenizer PATH ({DEFAULT_TOKENIZER} is not installed)")
        path = str(DEFAULT_TOKENIZER)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@torch.no_grad()
def score_tokens(model, tokenizer, token_ids: Sequence[int], temperature: float = 1.0) -> Tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """``([1, n] log-probabilities, [1, n] entropies at temperature)`` of ``token_ids`` under ``model``, each
    conditioned on the tokens before it and, for the first, on the tokenizer's BOS (or EOS) token."""
    from dschat.rlhf.experience import token_entropy

    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ViewerError("the model needs a tokenizer with a BOS or EOS token to score the first token")
    sequence = torch.tensor([[start] + list(token_ids)])
    logits = model(input_ids=sequence).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, sequence[:, 1:, None]).squeeze(-1)
    return logprobs, token_entropy(logits, temperature)


def macro_texts(token_ids: Sequence[int], segment_ids: Sequence[int], tokenizer) -> List[str]:
    """The text of each macro; characters split across tokens are shown whole, in the macro completing them."""
    aligned = token_pieces(token_ids, text_decoder(tokenizer))
    texts: List[str] = []
    for index, segment in enumerate(segment_ids):
        piece = aligned[1][index] if aligned is not None else tokenizer.decode([token_ids[index]])
        if segment == len(texts):
            texts.append(piece)
        else:
            texts[-1] += piece
    return texts


def segment_text(text: str, tokenizer, termination: str, options: TerminationOptions,
                 model=None, temperature: float = 1.0) -> Tuple[List[str], bool]:
    """(macro texts, fell back to token level) of ``text`` as one response under rule ``termination``."""
    token_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([token_ids], dtype=torch.long)
    logprobs, entropy = (score_tokens(model, tokenizer, token_ids, temperature) if model is not None and token_ids
                         else (None, None))
    batch = SegmentationBatch(action_mask=torch.ones_like(ids, dtype=torch.bool), response_token_ids=ids,
                              tokenizer=tokenizer, ref_logprobs=logprobs, entropy=entropy)
    segmentation = build_termination(termination, options)(batch)
    return macro_texts(token_ids, segmentation.segment_ids[0].tolist(), tokenizer), bool(segmentation.fallback[0])


def render(macros: Sequence[str], separator: str = SEPARATOR) -> str:
    """The macros, each followed by ``separator`` (the review discussion's format); the separator goes before
    a macro's trailing whitespace so that a code macro ending in a newline shows ``return x@@`` + newline."""
    out = []
    for macro in macros:
        body = macro.rstrip()
        out.append(body + separator + macro[len(body):])
    return "".join(out)


def run(args: argparse.Namespace) -> str:
    if args.termination in MODEL_RULES and args.model is None:
        raise ViewerError(f"--termination {args.termination} scores the text with a language model: pass --model "
                          "PATH (any Hugging Face causal LM)")
    text = args.text if args.text is not None else args.file.read_text(encoding="utf-8")
    tokenizer = load_tokenizer(args.tokenizer, args.model)
    model = None
    if args.model is not None:
        from dschat.model import load_causal_lm

        model = load_causal_lm(args.model, tokenizer).eval()
    try:
        options = select(args, TerminationConfig).termination_options(seed=args.seed)  # step 3's first process
        macros, fell_back = segment_text(text, tokenizer, args.termination, options, model, args.temperature)
    except (ValueError, RuntimeError) as error:
        raise ViewerError(str(error)) from None
    if fell_back:
        print(f"note: {args.termination} could not segment this text; showing token-level macros",
              file=sys.stderr)
    return render(macros, args.sep)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_arg_parser().parse_args(argv)
    try:
        print(run(args))
    except (ViewerError, OSError, ValueError) as error:
        print(f"viewer: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
