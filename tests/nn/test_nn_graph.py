"""graph_conv layers (PyG) and the gnn model: shapes, the GCN formula, heads, errors, save/load."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import MODELS
from toolbox.nn import build_layer

pytest.importorskip("torch_geometric")

# a 5-node path 0-1-2-3-4 plus the edge 0-4 (a cycle), both directions
EDGES = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 0], [1, 0, 2, 1, 3, 2, 4, 3, 0, 4]])


def features(n: int = 5, d: int = 3) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("graph_conv/gcn", "GCNConv"),
        ({"name": "graph_conv/sage", "aggr": "max"}, "SAGEConv"),
        ({"name": "graph_conv/gat", "heads": 2}, "GATConv"),
        ({"name": "graph_conv/gin", "mlp": {"name": "mlp/dense", "hidden_dims": [8]}}, "GINConv"),
    ],
)
def test_each_graph_conv_is_the_pyg_layer_with_the_injected_widths(spec, cls) -> None:
    layer = build_layer(spec, role="graph_conv", in_dim=3, out_dim=4)
    assert type(layer).__name__ == cls
    assert layer(features(), EDGES).shape == (5, 4)


def test_gcn_computes_the_normalised_adjacency_product() -> None:
    torch.manual_seed(0)
    layer = build_layer("graph_conv/gcn", in_dim=3, out_dim=2)
    x = features()
    a = torch.zeros(5, 5)
    a[EDGES[1], EDGES[0]] = 1.0
    a = a + torch.eye(5)
    d = a.sum(1).rsqrt()
    expected = (d[:, None] * a * d[None, :]) @ (x @ layer.lin.weight.T) + layer.bias
    torch.testing.assert_close(layer(x, EDGES), expected)


def test_gat_width_must_divide_by_heads_and_a_slot_refuses_other_roles() -> None:
    with pytest.raises(ConfigError, match="out_dim 10 is not divisible by heads=4"):
        build_layer({"name": "graph_conv/gat", "heads": 4}, role="graph_conv", in_dim=3, out_dim=10)
    with pytest.raises(ConfigError, match="model.conv.name: 'norm/layernorm' is not a graph_conv layer"):
        MODELS.build({"name": "gnn", "conv": "norm/layernorm"}, "model", in_dim=3, num_classes=2)


def gnn(**settings):
    torch.manual_seed(0)
    return MODELS.build({"name": "gnn", **settings}, "model", in_dim=3, num_classes=2)


def test_heads_for_nodes_edges_and_graphs() -> None:
    x = features()
    node = gnn(hidden_dims=[8, 8], norm="norm/batchnorm")
    assert [type(c).__name__ for c in node.convs] == ["GCNConv", "GCNConv"]
    assert node.out_conv.out_channels == 2 and node(x, EDGES).shape == (5, 2)

    edge = gnn(task="edge", hidden_dims=[8, 4])
    pairs = torch.tensor([[0, 1], [2, 4]])
    z = edge.eval().encode(x, EDGES)
    assert z.shape == (5, 4)
    torch.testing.assert_close(edge(x, EDGES, edge_label_index=pairs), (z[[0, 1]] * z[[2, 4]]).sum(-1))

    graph = gnn(task="graph", hidden_dims=[8], pool="add").eval()
    batch = torch.tensor([0, 0, 0, 1, 1])
    out = graph(x, EDGES, batch=batch)
    assert out.shape == (2, 2)
    z = graph.acts[0](graph.norms[0](graph.convs[0](x, EDGES)))
    torch.testing.assert_close(out, graph.head(torch.stack([z[:3].sum(0), z[3:].sum(0)])))


def test_a_node_task_needs_num_classes() -> None:
    with pytest.raises(ConfigError, match="model.num_classes: a node task needs the number of classes"):
        MODELS.build({"name": "gnn"}, "model", in_dim=3)


def test_save_pretrained_and_the_pretrained_model_rebuild_it(tmp_path) -> None:
    model = gnn(conv={"name": "graph_conv/gat", "heads": 2}, hidden_dims=[4]).eval()
    model.save_pretrained(tmp_path / "model")
    loaded = MODELS.build({"name": "pretrained", "path": str(tmp_path / "model")}, "model").eval()
    assert type(loaded).__name__ == "GNN" and loaded.settings == model.settings
    torch.testing.assert_close(loaded(features(), EDGES), model(features(), EDGES))


def sparse_rows(n: int = 40, d: int = 30) -> torch.Tensor:
    """Bag-of-words-like features: about a tenth of the entries non-zero."""
    g = torch.Generator().manual_seed(1)
    return torch.rand(n, d, generator=g) * (torch.rand(n, d, generator=g) < 0.1)


def ring(n: int) -> torch.Tensor:
    i = torch.arange(n)
    return torch.stack([torch.cat([i, (i + 1) % n]), torch.cat([(i + 1) % n, i])])


@pytest.mark.parametrize("conv", ["graph_conv/gcn", {"name": "graph_conv/gat", "heads": 2}])
def test_sparse_features_give_the_dense_logits_and_gradients(conv) -> None:
    """data.dataset.sparse_features: the same model on COO features computes what it does on dense ones."""
    x, edges = sparse_rows(), ring(40)
    torch.manual_seed(0)
    model = MODELS.build(
        {
            "name": "gnn",
            "in_dim": 30,
            "num_classes": 3,
            "conv": conv,
            "out_conv": "graph_conv/gcn",
            "hidden_dims": [8],
        }
    )
    model.eval()
    dense = model(x, edges)
    dense.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    sparse = model(x.to_sparse_coo().coalesce(), edges)
    sparse.square().sum().backward()
    assert torch.allclose(sparse, dense, atol=1e-6)
    for g, p in zip(grads, model.parameters(), strict=True):
        assert torch.allclose(p.grad, g, atol=1e-5)


def test_sparse_dropout_drops_stored_entries_at_the_rate_and_keeps_zeros() -> None:
    x = sparse_rows(400, 50)
    model = MODELS.build({"name": "gnn", "in_dim": 50, "num_classes": 2, "dropout": 0.5})
    model.train()
    torch.manual_seed(0)
    out = model._drop(x.to_sparse_coo().coalesce()).to_dense()
    nonzero = x != 0
    assert not out[~nonzero].any()  # a zero stays zero
    kept = out[nonzero] != 0
    assert abs(kept.float().mean().item() - 0.5) < 0.03  # ~1000 entries: within 2 sigma of p
    assert torch.allclose(out[nonzero][kept], 2 * x[nonzero][kept])  # survivors scaled by 1 / (1 - p)


def test_sparse_features_refuse_a_convolution_that_aggregates_them_first() -> None:
    model = MODELS.build({"name": "gnn", "in_dim": 30, "num_classes": 3, "conv": "graph_conv/sage"})
    with pytest.raises(ConfigError, match="sparse_features=false"):
        model(sparse_rows().to_sparse_coo(), ring(40))
