"""The training of each stage, ``run(args)`` on parsed flags; the command lines, light to import (``--help`` and
flag errors without torch or DeepSpeed), are in :mod:`dschat.cli`."""
