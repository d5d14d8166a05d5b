#!/usr/bin/env python
"""Thin entry point of the design card's stage folder; the command line lives in ``dschat/cli/ppo.py``, the
training in ``dschat/stages/ppo.py`` (``python -m dschat.cli.ppo --help``)."""
from dschat.cli.ppo import main
from dschat.core.entrypoint import run_cli

if __name__ == "__main__":
    run_cli(main)
