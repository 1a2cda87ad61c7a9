"""Graph convolutions (role ``graph_conv``): PyTorch Geometric's message-passing layers.

Each is built with ``in_dim`` and ``out_dim`` injected by the owning model and called as
``layer(x, edge_index)`` on node features ``(num_nodes, in_dim)``, returning ``(num_nodes, out_dim)``.
``out_dim`` is always the layer's total output width: a multi-head GAT that concatenates its heads
gives each head ``out_dim // heads`` channels.

PyG is imported when a layer is built, so that registering the layers costs nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from torch import nn

from toolbox.core.errors import ConfigError
from toolbox.core.registries import LAYERS
from toolbox.nn.layer_spec import build_layer


def _pyg():
    try:
        import torch_geometric.nn as pyg_nn
    except ImportError as e:  # pragma: no cover - torch-geometric is in requirements.lock
        raise ConfigError(
            "graph_conv layers need PyTorch Geometric: pip install torch-geometric (see requirements.lock)."
        ) from e
    return pyg_nn


@LAYERS.register("graph_conv/gcn")
def gcn(
    in_dim: int,
    out_dim: int,
    improved: bool = False,
    cached: bool = False,
    add_self_loops: bool = True,
    normalize: bool = True,
    bias: bool = True,
) -> nn.Module:
    """Kipf & Welling's graph convolution ``D^-1/2 (A + I) D^-1/2 X W`` (``torch_geometric.nn.GCNConv``).

    Args:
        in_dim: input feature size; injected.
        out_dim: output feature size; injected.
        improved: weight self-loops by 2 (``A + 2I``).
        cached: compute the normalised adjacency once and reuse it (full-batch training on one
            fixed graph only).
        add_self_loops: add ``I`` to the adjacency.
        normalize: apply the symmetric degree normalisation.
        bias: learn an additive bias.
    """
    return _pyg().GCNConv(
        in_dim,
        out_dim,
        improved=improved,
        cached=cached,
        add_self_loops=add_self_loops,
        normalize=normalize,
        bias=bias,
    )


@LAYERS.register("graph_conv/sage")
def sage(
    in_dim: int,
    out_dim: int,
    aggr: Literal["mean", "max", "sum"] = "mean",
    normalize: bool = False,
    root_weight: bool = True,
    bias: bool = True,
) -> nn.Module:
    """GraphSAGE: ``W1 x_i + W2 aggr_j x_j`` (``torch_geometric.nn.SAGEConv``).

    Args:
        in_dim: input feature size; injected.
        out_dim: output feature size; injected.
        aggr: how neighbour features are aggregated.
        normalize: L2-normalise the output features.
        root_weight: add the transformed features of the node itself.
        bias: learn an additive bias.
    """
    return _pyg().SAGEConv(
        in_dim, out_dim, aggr=aggr, normalize=normalize, root_weight=root_weight, bias=bias
    )


@LAYERS.register("graph_conv/gat")
def gat(
    in_dim: int,
    out_dim: int,
    heads: int = 1,
    concat: bool = True,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    add_self_loops: bool = True,
    bias: bool = True,
) -> nn.Module:
    """Graph attention (Veličković et al., 2018) (``torch_geometric.nn.GATConv``).

    Args:
        in_dim: input feature size; injected.
        out_dim: output width; injected. With ``concat`` the ``heads`` outputs of
            ``out_dim // heads`` channels are concatenated; without it each head has ``out_dim``
            channels and they are averaged.
        heads: attention heads.
        concat: concatenate the heads (hidden layers) or average them (an output layer).
        negative_slope: slope of the LeakyReLU in the attention scores.
        dropout: dropout of the normalised attention coefficients.
        add_self_loops: let each node attend to itself.
        bias: learn an additive bias.
    """
    if concat and out_dim % heads:
        raise ConfigError(
            f"graph_conv/gat: out_dim {out_dim} is not divisible by heads={heads}; with concat=true each "
            "head has out_dim // heads channels: choose a width that is a multiple of heads."
        )
    channels = out_dim // heads if concat else out_dim
    return _pyg().GATConv(
        in_dim,
        channels,
        heads=heads,
        concat=concat,
        negative_slope=negative_slope,
        dropout=dropout,
        add_self_loops=add_self_loops,
        bias=bias,
    )


@LAYERS.register("graph_conv/gin")
def gin(
    in_dim: int,
    out_dim: int,
    mlp: dict[str, Any] = {"name": "mlp/dense", "hidden_dims": [], "norm": None},  # noqa: B006 - never mutated
    eps: float = 0.0,
    train_eps: bool = False,
) -> nn.Module:
    """Graph isomorphism network layer ``MLP((1 + eps) x_i + sum_j x_j)`` (``torch_geometric.nn.GINConv``).

    Args:
        in_dim: input feature size; injected.
        out_dim: output feature size; injected.
        mlp: layer spec of the MLP applied after the sum (``in_dim``, ``out_dim`` injected), e.g.
            ``{name: mlp/dense, hidden_dims: [64], norm: norm/batchnorm}`` as in the GIN paper.
        eps: the initial weight of the node's own features.
        train_eps: learn ``eps``.
    """
    net = build_layer(mlp, path="mlp", role="mlp", in_dim=in_dim, out_dim=out_dim)
    return _pyg().GINConv(net, eps=eps, train_eps=train_eps)
