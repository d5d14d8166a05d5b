"""One module per dataset; importing this package registers them all (see ``registry``)."""
from . import (apps, arithmetic, gsm8k, hendrycks_math, hh_rlhf, humaneval, jsonl, synthetic,  # noqa: F401
               synthetic_long, tldr, webgpt)  # (registration)
