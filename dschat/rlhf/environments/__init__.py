"""Step 3's multi-turn environments (``--env NAME``): the text interface (:mod:`.base`), the registry
(:mod:`.registry`) and the built-in environments, each one module registered on import like a dataset adapter.

Torch-free: the command line lists and checks ``--env`` without importing torch.
"""
from .base import StepResult, TextEnvironment
from .registry import available_environments, make_environment, register_environment, environment_tasks

__all__ = ["StepResult", "TextEnvironment", "available_environments", "environment_tasks", "make_environment",
           "register_environment"]
