#!/usr/bin/env python
"""Thin entry point of the design card's stage folder; the command line lives in ``dschat/cli/rm.py``, the
training in ``dschat/stages/rm.py`` (``python -m dschat.cli.rm --help``)."""
from dschat.cli.rm import main
from dschat.core.entrypoint import run_cli

if __name__ == "__main__":
    run_cli(main)
