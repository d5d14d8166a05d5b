#!/usr/bin/env python
"""Thin entry point of the design card's stage folder; the command line lives in ``dschat/cli/sft.py``, the
training in ``dschat/stages/sft.py`` (``python -m dschat.cli.sft --help``)."""
from dschat.cli.sft import main
from dschat.core.entrypoint import run_cli

if __name__ == "__main__":
    run_cli(main)
