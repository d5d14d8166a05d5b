"""The floor every other package stands on: the flag machinery (``config``: flags from dataclass fields, layered
YAML), the entry-point wrapper (``entrypoint``: one-line errors, logging, the thread default), lazy package exports,
seeding, the machine a figure names, and the distributed process group. Imports nothing else of ``dschat``."""
