"""Activation layers (role ``activation``): elementwise non-linearities with no dimensions."""

from __future__ import annotations

from typing import Literal

from torch import nn

from toolbox.core.registries import LAYERS


@LAYERS.register("activation/relu")
def relu() -> nn.Module:
    """Rectified linear unit, ``max(x, 0)``."""
    return nn.ReLU()


@LAYERS.register("activation/gelu")
def gelu(approximate: Literal["none", "tanh"] = "none") -> nn.Module:
    """Gaussian error linear unit, ``x * Phi(x)``.

    Args:
        approximate: ``none`` for the exact erf form, ``tanh`` for the tanh approximation (GPT-2).
    """
    return nn.GELU(approximate=approximate)


@LAYERS.register("activation/silu")
def silu() -> nn.Module:
    """Sigmoid linear unit (swish), ``x * sigmoid(x)``."""
    return nn.SiLU()


@LAYERS.register("activation/tanh")
def tanh() -> nn.Module:
    """Hyperbolic tangent."""
    return nn.Tanh()


@LAYERS.register("activation/elu")
def elu(alpha: float = 1.0) -> nn.Module:
    """Exponential linear unit, ``x`` for ``x > 0`` else ``alpha * (exp(x) - 1)`` (GAT's non-linearity).

    Args:
        alpha: the value the negative side saturates at (as ``-alpha``).
    """
    return nn.ELU(alpha=alpha)
