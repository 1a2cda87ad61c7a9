"""Normalization layers (role ``norm``), built with the feature dimension ``dim`` injected."""

from __future__ import annotations

from torch import nn

from toolbox.core.registries import LAYERS


@LAYERS.register("norm/layernorm")
def layernorm(dim: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """Layer normalization over the last dimension, with a learned scale and shift.

    Args:
        dim: size of the normalized (last) dimension; injected by the owning component.
        eps: added to the variance for numerical stability.
        bias: learn an additive shift as well as the scale.
    """
    return nn.LayerNorm(dim, eps=eps, bias=bias)


@LAYERS.register("norm/rmsnorm")
def rmsnorm(dim: int, eps: float = 1e-6) -> nn.Module:
    """Root-mean-square normalization (Llama): ``x / sqrt(mean(x^2) + eps) * weight``.

    Args:
        dim: size of the normalized (last) dimension; injected by the owning component.
        eps: added to the mean square for numerical stability (Llama uses 1e-6).
    """
    return nn.RMSNorm(dim, eps=eps)


@LAYERS.register("norm/batchnorm")
def batchnorm(dim: int, eps: float = 1e-5, momentum: float = 0.1) -> nn.Module:
    """Batch normalization over the rows of a ``(items, dim)`` input (nodes or graphs), with running
    statistics for evaluation (GIN's MLPs use it).

    Args:
        dim: the feature dimension; injected by the owning component.
        eps: added to the variance for numerical stability.
        momentum: weight of the current batch in the running statistics.
    """
    return nn.BatchNorm1d(dim, eps=eps, momentum=momentum)
