"""Device choice and determinism."""

from __future__ import annotations

import os
import random

from toolbox.core.errors import ConfigError


def resolve_device(device: str = "auto", local_rank: int = 0) -> str:
    """'auto' picks cuda:<local_rank> when a GPU is visible, else cpu; other values are checked."""
    import torch

    if device == "auto":
        return f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device: '{device}' was asked for but no CUDA GPU is visible; use device=cpu or auto."
        )
    if device not in ("cpu", "mps") and not device.startswith("cuda"):
        raise ConfigError(f"device: unknown device '{device}'; use auto, cpu, cuda or cuda:N.")
    return device


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_determinism(enabled: bool) -> None:
    """Ask torch for deterministic kernels (and cuBLAS for a fixed workspace), without the NaN fill.

    ``torch.use_deterministic_algorithms(True)`` also fills every ``torch.empty`` with NaN (a
    debugging aid for reads of uninitialised memory); deterministic kernels do not need it, and it
    cost TRL 44 of its ~51 ms per SFT step (a 4096 x 32768 scratch buffer filled every step), so it
    stays off.
    """
    import torch
    import torch.utils.deterministic

    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    if torch.backends.cudnn.is_available():
        torch.backends.cudnn.deterministic = enabled
        torch.backends.cudnn.benchmark = not enabled


def rng_state() -> dict:
    """Every RNG a run touches, for a checkpoint."""
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
