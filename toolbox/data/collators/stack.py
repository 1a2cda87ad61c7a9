"""Stack fixed-size examples into tensors (features and labels)."""

from __future__ import annotations

from typing import Any

import torch

from toolbox.core.registries import COLLATORS


@COLLATORS.register("stack")
class Stack:
    """Examples {x: list[float], y: int} → {x: float tensor [B, D], y: long tensor [B]}."""

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return {
            "x": torch.tensor([e["x"] for e in examples], dtype=torch.float32),
            "y": torch.tensor([e["y"] for e in examples], dtype=torch.long),
        }
