"""Transformer feed-forward layers (role ``feedforward``): position-wise ``dim -> hidden -> dim``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from toolbox.core.registries import LAYERS


@LAYERS.register("feedforward/gelu")
class GeluFeedForward(nn.Module):
    """The classic two-layer feed-forward (GPT-2, BERT): ``Linear -> GELU -> Linear -> dropout``.

    Args:
        dim: model width (input and output size); injected by the owning model.
        hidden_dim: inner width; ``None`` for ``4 * dim``.
        bias: give both Linear layers an additive bias.
        dropout: dropout probability on the output; 0 disables it.
    """

    def __init__(
        self, dim: int, hidden_dim: int | None = None, bias: bool = True, dropout: float = 0.0
    ) -> None:
        super().__init__()
        hidden_dim = hidden_dim or 4 * dim
        self.up_proj = nn.Linear(dim, hidden_dim, bias=bias)
        self.act = nn.GELU()
        self.down_proj = nn.Linear(hidden_dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(..., dim)`` to ``(..., dim)``."""
        return self.dropout(self.down_proj(self.act(self.up_proj(x))))


def swiglu_hidden_dim(dim: int, multiple_of: int = 32) -> int:
    """Llama's default SwiGLU width: ``2/3 * 4 * dim`` (the parameter count of a ``4 * dim`` GELU
    feed-forward), rounded up to a multiple of ``multiple_of``."""
    return multiple_of * math.ceil(int(8 * dim / 3) / multiple_of)


@LAYERS.register("feedforward/swiglu")
class SwiGLUFeedForward(nn.Module):
    """The gated feed-forward of Llama: ``down(silu(gate(x)) * up(x))``, then dropout.

    Its projections are named like Hugging Face's ``LlamaMLP`` (``gate_proj``, ``up_proj``,
    ``down_proj``), so Llama weights load into it by name.

    Args:
        dim: model width (input and output size); injected by the owning model.
        hidden_dim: inner width; ``None`` for ``8/3 * dim`` rounded up to a multiple of 32.
        bias: give the three Linear layers an additive bias (Llama has none).
        dropout: dropout probability on the output; 0 disables it.
    """

    def __init__(
        self, dim: int, hidden_dim: int | None = None, bias: bool = False, dropout: float = 0.0
    ) -> None:
        super().__init__()
        hidden_dim = hidden_dim or swiglu_hidden_dim(dim)
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=bias)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=bias)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(..., dim)`` to ``(..., dim)``."""
        return self.dropout(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)))
