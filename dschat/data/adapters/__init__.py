"""One module per dataset; importing this package registers them all (see ``registry``)."""
from . import apps, hh_rlhf, humaneval, jsonl, synthetic, synthetic_long, tldr, webgpt  # noqa: F401  (registration)
