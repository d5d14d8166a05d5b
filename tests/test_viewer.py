"""Segmentation viewer CLI: every registered rule through the registry, '@@' output, one-line errors."""
from __future__ import annotations

import subprocess
import sys

import pytest

from dschat.cli import viewer
from tests.fixtures.parsing.tiny_tokenizer import build_tiny_tokenizer

FOX = "The quick brown fox jumps over the lazy dog."
REVIEW_CODE = ("def queue_time(customers, n):\n    tills = [0] * n\n    for i in range(len(customers)):\n"
               "        tills[i % n] += customers[i]\n    return max(tills)\n")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_tokenizer")
    build_tiny_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory, tokenizer_dir):
    """A randomly initialised 1-layer Llama over the tiny tokenizer's vocabulary."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    vocab = len(AutoTokenizer.from_pretrained(tokenizer_dir))
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    path = tmp_path_factory.mktemp("tiny_lm")
    model.save_pretrained(path)
    return str(path)


def run_viewer(capsys, *argv):
    code = viewer.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_parsing_code_file_reproduces_the_review_cut(capsys, tmp_path, tokenizer_dir):
    source = tmp_path / "solution.py"
    source.write_text(REVIEW_CODE, encoding="utf-8")
    code, out, err = run_viewer(capsys, "--termination", "parsing", "--parser", "code", "--tokenizer",
                                tokenizer_dir, "--file", str(source))
    assert code == 0 and err == ""
    assert out == ("def queue_time(customers, n):@@\n    tills = [0] * n@@\n    for i in range(len(customers)):@@\n"
                   "        tills[i % n] += customers[i]@@\n    return max(tills)@@\n\n")


def test_parsing_spacy_text(capsys, tokenizer_dir):
    code, out, _ = run_viewer(capsys, "--termination", "parsing", "--parser", "spacy", "--parser_cutoff", "6",
                              "--tokenizer", tokenizer_dir, "--text", FOX)
    assert code == 0 and out == "The quick brown fox@@ jumps over the lazy dog.@@\n"


@pytest.mark.parametrize("argv", [["--termination", "fixed", "--ngram", "3"],
                                  ["--termination", "ngram", "--ngram", "inf"],
                                  ["--termination", "randomized", "--seed", "1"]])
def test_every_registered_rule_keeps_the_text(capsys, tokenizer_dir, argv):
    code, out, _ = run_viewer(capsys, *argv, "--tokenizer", tokenizer_dir, "--text", FOX)
    assert code == 0 and out.replace("@@", "") == FOX + "\n"


def test_fixed_ngram_cut(capsys, tokenizer_dir):
    code, out, _ = run_viewer(capsys, "--termination", "fixed", "--ngram", "3", "--tokenizer", tokenizer_dir,
                              "--text", FOX)
    assert code == 0 and out == "The quick brown@@ fox jumps over@@ the lazy dog@@.@@\n"


def test_ppl_with_a_model(capsys, tokenizer_dir, tiny_lm):
    code, out, _ = run_viewer(capsys, "--termination", "ppl", "--model", tiny_lm, "--tokenizer", tokenizer_dir,
                              "--text", FOX)
    assert code == 0 and out.replace("@@", "") == FOX + "\n" and out.count("@@") >= 1


def test_randomized_lengths_are_spelled_as_in_step3(capsys, tokenizer_dir):
    """Two 3-token macros (``--random_lengths 3 --random_repeat 2``), then the rest as one macro: the fixed
    3-gram cut with its last two macros merged."""
    code, out, _ = run_viewer(capsys, "--termination", "randomized", "--random_lengths", "3", "--random_repeat",
                              "2", "--tokenizer", tokenizer_dir, "--text", FOX)
    assert code == 0 and out == "The quick brown@@ fox jumps over@@ the lazy dog.@@\n"
    with pytest.raises(SystemExit):
        viewer.main(["--termination", "randomized", "--random_lengths", "2", "0", "--text", FOX])
    assert "--random_lengths 0: expected" in capsys.readouterr().err


def test_options_mean_what_step3_makes_of_them():
    """The same flags give the viewer and step 3 (first process) the same rule options, defaults included, and
    those are the options the flags name."""
    from dschat.rlhf.macro_action.termination import TerminationOptions
    from dschat.stages.configs import TerminationConfig
    from dschat.stages.configs import RLHFConfig
    from dschat.core.config import ConfigParser, select

    cases = [([], TerminationOptions(seed=1234)), (["--ngram", "inf"], TerminationOptions(ngram=None, seed=1234)),
             (["--termination", "randomized", "--ngram", "5", "--random_lengths", "2", "3", "--random_repeat", "2",
               "--seed", "7", "--parser", "spacy", "--parser_cutoff", "4", "--entropy_quantile", "0.3",
               "--temperature", "0.5"],
              TerminationOptions(ngram=5, lengths=(2, 3), repeat=2, seed=7, parser="spacy", parser_cutoff=4,
                                 entropy_quantile=0.3))]
    for flags, expected in cases:
        trainer_config = ConfigParser(RLHFConfig).parse_config(flags + ["--output_dir", "unused"])
        viewer_args = viewer.build_arg_parser().parse_args(flags + ["--text", "x"])
        assert viewer_args.termination == trainer_config.termination
        assert viewer_args.temperature == trainer_config.temperature
        step3 = trainer_config.termination_options(seed=trainer_config.seed + 0)
        assert select(viewer_args, TerminationConfig).termination_options(seed=viewer_args.seed) == step3 == expected


def test_offline_model_names_are_accepted(capsys):
    """``--model tiny-gemma`` (an offline name, not a directory) scores the text with its own tokenizer."""
    code, out, err = run_viewer(capsys, "--termination", "ppl", "--model", "tiny-gemma", "--text", FOX)
    assert code == 0 and err == "" and out.replace("@@", "") == FOX + "\n"


@pytest.mark.slow
def test_smollm2_by_its_offline_name(capsys):
    code, out, err = run_viewer(capsys, "--termination", "ppl", "--model", "smollm2-135m-instruct", "--text", FOX)
    assert code == 0 and out.replace("@@", "") == FOX + "\n" and out.count("@@") >= 2


def test_ppl_without_a_model_is_a_one_line_error(capsys, tokenizer_dir):
    code, out, err = run_viewer(capsys, "--termination", "ppl", "--tokenizer", tokenizer_dir, "--text", FOX)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "pass --model PATH" in err


def test_missing_tokenizer_is_a_one_line_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(viewer, "DEFAULT_TOKENIZER", tmp_path / "absent")
    code, _, err = run_viewer(capsys, "--termination", "fixed", "--text", FOX)
    assert code == 1 and err.count("\n") == 1 and "pass --tokenizer PATH" in err


def test_unknown_parser_is_rejected(capsys, tokenizer_dir):
    with pytest.raises(SystemExit) as exit_info:
        viewer.main(["--termination", "parsing", "--parser", "nope", "--tokenizer", tokenizer_dir, "--text", "x"])
    assert exit_info.value.code == 2 and "--parser nope: expected one of auto, spacy" in capsys.readouterr().err


def test_fallback_is_noted_on_stderr(capsys, tokenizer_dir):
    code, out, err = run_viewer(capsys, "--termination", "parsing", "--parser", "code", "--tokenizer",
                                tokenizer_dir, "--text", "def f(:")
    assert code == 0 and "token-level" in err and out.replace("@@", "") == "def f(:\n"


def test_render_puts_the_separator_before_trailing_whitespace():
    assert viewer.render(["a b", " c\n", "\n"]) == "a b@@ c@@\n@@\n"
    assert viewer.render(["a", "b"], " @@ ") == "a @@ b @@ "


def test_module_entry_point_help():
    result = subprocess.run([sys.executable, "-m", "dschat.cli.viewer", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "--termination" in result.stdout


def test_entropy_with_a_model_cuts_after_the_forks(capsys, tokenizer_dir, tiny_lm):
    """The viewer's entropy cuts are the rule's on the model's entropies at --temperature."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dschat.rlhf.macro_action.termination import entropy_segments

    code, out, _ = run_viewer(capsys, "--termination", "entropy", "--entropy_quantile", "0.25", "--temperature",
                              "0.8", "--model", tiny_lm, "--tokenizer", tokenizer_dir, "--text", FOX)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids = tokenizer(FOX, add_special_tokens=False)["input_ids"]
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(tiny_lm)(input_ids=torch.tensor([[start] + ids])).logits
    entropy = torch.distributions.Categorical(logits=logits[:, :-1] / 0.8).entropy()
    macros = int(entropy_segments(entropy, torch.ones_like(entropy, dtype=torch.bool), quantile=0.25).max()) + 1
    assert code == 0 and out.replace("@@", "") == FOX + "\n" and out.count("@@") == macros > 1


def test_entropy_without_a_model_is_a_one_line_error(capsys, tokenizer_dir):
    code, _, err = run_viewer(capsys, "--termination", "entropy", "--tokenizer", tokenizer_dir, "--text", FOX)
    assert code == 1 and err.count("\n") == 1 and "--model" in err
