"""One module per dataset; importing this package registers them all (see ``registry``)."""
from . import (apps, arithmetic, hh_rlhf, humaneval, jsonl, synthetic, synthetic_long, tldr,  # noqa: F401
               webgpt)  # (registration)
