"""``gnn``: a graph neural network whose encoder layers are ``graph_conv`` layer specs, with a head
for node, edge (link) or graph tasks.

::

    node   x -> [dropout -> conv -> norm -> act] * len(hidden_dims) -> dropout -> out_conv -> logits per node
    edge   x -> [dropout -> conv -> norm -> act] * (len(hidden_dims) - 1) -> dropout -> out_conv -> z;
           score(i, j) = <z_i, z_j>  (the inner-product decoder of GAE)
    graph  x -> [dropout -> conv -> norm -> act] * len(hidden_dims) -> pool -> head MLP -> logits per graph

``forward(x, edge_index, batch=None, edge_label_index=None)``: ``batch`` assigns nodes to graphs
(graph task; None for a single graph), ``edge_label_index`` the node pairs to score (edge task).
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import torch
from torch import nn

from toolbox.core.bounds import AtLeastOne, Fraction
from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS
from toolbox.nn.layer_spec import build_layer, config_path
from toolbox.nn.models.saved import SavedModel

POOLS = ("mean", "add", "max")
# convolutions whose first operation is a linear map of x, so they take sparse COO features
SPARSE_INPUT = ("GCNConv", "GATConv")


@MODELS.register("gnn")
class GNN(SavedModel, nn.Module):
    """A stack of graph convolutions and a task head.

    Args:
        in_dim: node feature size; injected from the data.
        num_classes: classes of a node or graph task; injected from the data (unused by ``edge``).
        task: ``node`` (a class per node), ``edge`` (a score per node pair) or ``graph`` (a class per graph).
        conv: layer spec of each hidden convolution (``in_dim``, ``out_dim`` injected), e.g.
            ``graph_conv/gcn`` or ``{name: graph_conv/gat, heads: 8, dropout: 0.6}``.
        out_conv: layer spec of the last convolution of the node and edge tasks (default: ``conv``),
            e.g. a one-head GAT that averages: ``{name: graph_conv/gat, heads: 1, concat: false}``.
        hidden_dims: widths of the hidden convolutions. Node: convolutions ``in -> h1 -> ... ->
            num_classes``; edge: ``in -> h1 -> ... -> h_last`` (the embedding); graph: ``in -> h1 ->
            ... -> h_last``, then pooling and the head.
        norm: layer spec of a norm after each hidden convolution (``dim`` injected), e.g.
            ``norm/batchnorm``; None for none.
        activation: layer spec of the non-linearity after each hidden convolution.
        dropout: dropout probability before every convolution (the input features included, as in
            the GCN and GAT papers).
        pool: graph task: how node embeddings become one vector per graph (``mean``, ``add``, ``max``).
        head: graph task: layer spec of the MLP from the pooled vector to the logits (``in_dim``,
            ``out_dim`` injected).
    """

    registry_name = "gnn"

    def __init__(
        self,
        in_dim: AtLeastOne,
        num_classes: AtLeastOne | None = None,
        task: Literal["node", "edge", "graph"] = "node",
        conv: dict[str, Any] | str = "graph_conv/gcn",
        out_conv: dict[str, Any] | str | None = None,
        hidden_dims: list[AtLeastOne] = [16],  # noqa: B006 - a config default, never mutated
        norm: dict[str, Any] | str | None = None,
        activation: dict[str, Any] | str = "activation/relu",
        dropout: Fraction = 0.5,
        pool: Literal["mean", "add", "max"] = "mean",
        head: dict[str, Any] | str = {"name": "mlp/dense", "hidden_dims": []},  # noqa: B006
    ) -> None:
        super().__init__()
        if task in ("node", "graph") and num_classes is None:
            raise ConfigError(
                f"model.num_classes: a {task} task needs the number of classes; the data source gives it "
                "(facts.num_classes), or set a source that has labels."
            )
        if task == "edge" and not hidden_dims:
            raise ConfigError(
                "model.hidden_dims: the edge task needs at least one width (the embedding size)."
            )
        self.settings = {
            "in_dim": in_dim,
            "num_classes": num_classes,
            "task": task,
            "conv": conv,
            "out_conv": out_conv,
            "hidden_dims": list(hidden_dims),
            "norm": norm,
            "activation": activation,
            "dropout": dropout,
            "pool": pool,
            "head": head,
        }
        self.task = task
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        if task == "node":
            widths, last = [in_dim, *hidden_dims], num_classes
        elif task == "edge":
            widths, last = [in_dim, *hidden_dims[:-1]], hidden_dims[-1]
        else:
            widths, last = [in_dim, *hidden_dims], None
        with config_path("model"):
            self.convs = nn.ModuleList(
                build_layer(conv, path="conv", role="graph_conv", in_dim=a, out_dim=b)
                for a, b in zip(widths[:-1], widths[1:], strict=True)
            )
            self.norms = nn.ModuleList(
                build_layer(norm, path="norm", role="norm", dim=w) if norm is not None else nn.Identity()
                for w in widths[1:]
            )
            self.acts = nn.ModuleList(
                build_layer(activation, path="activation", role="activation") for _ in widths[1:]
            )
            self.out_conv = (
                build_layer(
                    out_conv if out_conv is not None else conv,
                    path="out_conv" if out_conv is not None else "conv",
                    role="graph_conv",
                    in_dim=widths[-1],
                    out_dim=last,
                )
                if last is not None
                else None
            )
            self.head = (
                build_layer(head, path="head", role="mlp", in_dim=widths[-1], out_dim=num_classes)
                if task == "graph"
                else None
            )
        self.pool = pool

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        """Dropout; of sparse features (``data.dataset.sparse_features``) over the stored non-zeros
        only, which gives the distribution of dense dropout (a zero stays zero either way). Sparse
        features leave as CSR, whose product with the first layer's weight is the fast one."""
        if not x.is_sparse:
            return self.dropout(x)
        with warnings.catch_warnings():  # "sparse CSR support is in beta", once per process
            warnings.simplefilter("ignore", UserWarning)
            x = (x if x.is_coalesced() else x.coalesce()).to_sparse_csr()
        if not self.training or isinstance(self.dropout, nn.Identity):
            return x
        values = self.dropout(x.values())
        return torch.sparse_csr_tensor(
            x.crow_indices(), x.col_indices(), values, x.shape, check_invariants=False
        )

    def encode(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Node embeddings after the hidden convolutions (and the last one, for node and edge tasks)."""
        if x.is_sparse:
            first = self.convs[0] if len(self.convs) else self.out_conv
            if type(first).__name__ not in SPARSE_INPUT:
                raise ConfigError(
                    f"data.dataset.sparse_features: the first convolution ({type(first).__name__}) does "
                    f"not take sparse node features (only {', '.join(SPARSE_INPUT)} do); set "
                    "data.dataset.sparse_features=false."
                )
        for conv, norm, act in zip(self.convs, self.norms, self.acts, strict=True):
            x = act(norm(conv(self._drop(x), edge_index)))
        if self.out_conv is not None:
            x = self.out_conv(self._drop(x), edge_index)
        return x

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        batch: torch.Tensor | None = None,
        edge_label_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Node task: ``(num_nodes, num_classes)`` logits; edge task: one score per column of
        ``edge_label_index`` ``(2, E)``; graph task: ``(num_graphs, num_classes)`` logits."""
        z = self.encode(x, edge_index)
        if self.task == "node":
            return z
        if self.task == "edge":
            if edge_label_index is None:
                raise ValueError("gnn(task=edge) scores node pairs: pass edge_label_index (2, E).")
            return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)
        from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

        pool = {"mean": global_mean_pool, "add": global_add_pool, "max": global_max_pool}[self.pool]
        return self.head(pool(z, batch))
