#!/usr/bin/env python
"""Thin entry point of the design card's stage folder; the command line lives in ``dschat/cli/dpo.py``, the
training in ``dschat/stages/dpo.py`` (``python -m dschat.cli.dpo --help``)."""
from dschat.cli.dpo import main
from dschat.core.entrypoint import run_cli

if __name__ == "__main__":
    run_cli(main)
