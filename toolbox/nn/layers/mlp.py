"""The multi-layer perceptron (role ``mlp``): Linear layers with activations in between."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from toolbox.core.registries import LAYERS
from toolbox.nn.layer_spec import build_layer


@LAYERS.register("mlp/dense")
class MLP(nn.Module):
    """A stack of fully connected layers: ``[Linear -> norm -> activation -> dropout] * n -> Linear``.

    Each hidden layer is a Linear followed by the optional norm, the activation and, when
    ``dropout > 0``, a Dropout; the output layer is a bare Linear (no activation), so the output is
    logits or an unconstrained regression value.

    Args:
        in_dim: size of the input features; injected by the owning component.
        out_dim: size of the output; injected by the owning component.
        hidden_dims: sizes of the hidden layers, in order; empty for a single Linear.
        activation: layer spec of the activation after each hidden layer, e.g.
            ``{"name": "activation/gelu"}``.
        norm: layer spec of a norm after each hidden Linear (``dim`` injected), e.g.
            ``{"name": "norm/layernorm"}``; ``None`` for none.
        dropout: dropout probability after each hidden activation; 0 disables it.
        bias: give the Linear layers an additive bias.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_dims: list[int] = [64],  # noqa: B006 - a config default, never mutated
        activation: dict[str, Any] = {"name": "activation/relu"},  # noqa: B006
        norm: dict[str, Any] | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for hidden in hidden_dims:
            layers.append(nn.Linear(width, hidden, bias=bias))
            if norm is not None:
                layers.append(build_layer(norm, path="norm", role="norm", dim=hidden))
            layers.append(build_layer(activation, path="activation", role="activation"))
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = hidden
        layers.append(nn.Linear(width, out_dim, bias=bias))
        self.net = nn.Sequential(*layers)
        self.in_dim = in_dim
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(..., in_dim)`` features to ``(..., out_dim)`` outputs."""
        return self.net(x)
