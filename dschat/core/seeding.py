"""Seeds and RNG snapshots (for exact resume); the ``--seed`` flag is ``dschat.stages.configs.SeedArgs``. NumPy
and torch are imported where they are used."""
from __future__ import annotations

import contextlib
import random


def set_random_seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def rng_state() -> dict:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def seeded_rng(seed):
    """Run the block with every generator seeded by ``seed``, then restore the previous states (so the block
    draws the same noise on every call and leaves the caller's streams as they were); ``None`` does nothing."""
    if seed is None:
        yield
        return
    state = rng_state()
    set_random_seed(seed)
    try:
        yield
    finally:
        set_rng_state(state)
