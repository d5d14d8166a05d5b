"""A pretrained model's conventions, the opposite of the tiny Gemma's (SmolLM2-135M-Instruct's, at toy size): the
tokenizer's pad is its eos, its bos is a chat token, it brings a chat template of its own (ChatML with a system
turn), and the causal LM ties its lm_head to the input embeddings. Steps 1-2 must still score every sequence at
its final eos, identically under plain transformers and TRL, keep the lm_head tied, and save the layout they
trained on as the chat template."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from conftest import save_tied_llama
from dschat.data import PairDataset, load_pairs
from dschat.model import load_causal_lm, load_reward_model, load_tokenizer

CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<bos>system\nYou are a helpful assistant<eos>\n' }}{% endif %}"
          "{{ '<bos>' + message['role'] + '\n' + message['content'] + '<eos>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<bos>assistant\n' }}{% endif %}")
"""SmolLM2-Instruct's template with the shipped tokenizer's special tokens (``<bos>`` for ``<|im_start|>``)."""


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    """A tiny tied-embedding Llama saved with a tokenizer whose pad is its eos and which has a ChatML template."""
    return save_tied_llama(tmp_path_factory.mktemp("pretrained"), chat_template=CHATML)


def test_pad_equal_to_eos_gets_its_own_pad_and_the_lm_head_stays_tied(pretrained_dir):
    tokenizer = load_tokenizer(pretrained_dir)
    assert tokenizer.pad_token_id != tokenizer.eos_token_id and tokenizer.pad_token == "<pad>"
    base = AutoModelForCausalLM.from_pretrained(pretrained_dir)
    torch.manual_seed(0)
    model = load_causal_lm(pretrained_dir, tokenizer)
    embeddings = model.get_input_embeddings().weight
    assert embeddings.shape[0] == len(tokenizer) and model.config.pad_token_id == tokenizer.pad_token_id
    assert model.get_output_embeddings().weight is embeddings  # the grown table is still the lm_head
    assert torch.equal(embeddings[:base.config.vocab_size], base.get_input_embeddings().weight)
    critic = load_reward_model(pretrained_dir, tokenizer)
    assert critic.get_output_embeddings() is None and critic.score.weight.shape == (1, embeddings.shape[1])
    assert torch.equal(critic.get_input_embeddings().weight[:base.config.vocab_size],
                       base.get_input_embeddings().weight)


@pytest.fixture(scope="module")
def rm_dir(pretrained_dir, tmp_path_factory):
    from dschat.cli.rm import main as rm_main

    out = tmp_path_factory.mktemp("rm")
    rm_main(["--model_name_or_path", pretrained_dir, "--output_dir", str(out), "--max_seq_len", "64",
             "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "3",
             "--max_eval_samples", "16", "--no_progress_bar", "--log_steps", "1"])
    return str(out)


def test_saved_reward_model_is_scored_at_the_final_eos_under_every_convention(rm_dir):
    """The saved RM keeps a pad distinct from eos (HF's pooling reads the last non-pad token: the final eos, not
    the token before it, as pad == eos would make it), and its chat template writes the trained layout, so TRL's
    conversational GRPO call scores like the project (the base model's ChatML template would add a system turn
    and a trailing newline)."""
    from evaluation.rm_interop import ranking_report

    tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    assert AutoConfig.from_pretrained(rm_dir).pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    pairs = load_pairs("synthetic", split="validation")[:24]
    assert PairDataset(pairs, tokenizer, 64)[0]["chosen_input_ids"][-1].item() == tokenizer.eos_token_id
    chat = [{"role": "user", "content": pairs[0].prompt}, {"role": "assistant", "content": pairs[0].chosen}]
    assert tokenizer.apply_chat_template(chat, tokenize=False) == f"<bos>{pairs[0].prompt}{pairs[0].chosen}<eos>"
    conventions = ("plain", "plain_right", "plain_left", "trl_get_reward", "trl_grpo_chat", "trl_grpo_text_function")
    report = ranking_report(rm_dir, pairs, conventions, max_seq_len=64)
    for name, row in report.items():
        assert row["max_abs_diff"] < 1e-4 and row["agreement"] == 1.0, (name, row)


def test_trained_tied_causal_lm_is_saved_with_one_embedding_and_the_layout_template(pretrained_dir, tmp_path):
    """The saved SFT model stores the tied lm_head once (as the embedding: a copy per key would write a second,
    'unexpected' lm_head), reloads tied, and its tokenizer adds the bos and renders the layout, not ChatML."""
    from safetensors import safe_open

    from dschat.cli.sft import main as sft_main

    sft_main(["--model_name_or_path", pretrained_dir, "--output_dir", str(tmp_path), "--max_seq_len", "64",
              "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "2",
              "--max_eval_samples", "8", "--no_progress_bar", "--log_steps", "1"])
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as weights:
        assert "lm_head.weight" not in weights.keys() and "model.embed_tokens.weight" in weights.keys()
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert tokenizer("a review")["input_ids"][0] == tokenizer.bos_token_id != tokenizer.pad_token_id
    prompt = [{"role": "user", "content": "Review:"}]
    assert tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) == "<bos>Review:"
