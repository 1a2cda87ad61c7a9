"""Neighbour-sampled training of node classification: the error without PyG's sampler backend,
the mini-batch it builds (with a stand-in for the compiled sampler that takes every neighbour),
a sampled training run, and the real backend where it is installed."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import COLLATORS, OBJECTIVES, SOURCES

pytest.importorskip("torch_geometric")

import toolbox.data.neighbor_sampling as ns  # noqa: E402

HAS_BACKEND = ns.backend() is not None
# PyG warns that its torch-sparse path is deprecated whenever pyg-lib is absent (the stand-in too)
pytestmark = pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without a 'pyg-lib'")


def all_neighbours(self, seed, seed_time=None, **kwargs):
    """What pyg-lib's sampler returns with num_neighbors=-1 at every hop: the seeds first, then
    each hop's new nodes; edges (source row, destination col) relabelled to the subgraph."""
    from torch_geometric.sampler import SamplerOutput

    nodes = seed.tolist()
    index = {n: i for i, n in enumerate(nodes)}
    rows, cols, edges, frontier = [], [], [], list(nodes)
    for _ in range(self.num_neighbors.num_hops):
        new = []
        for v in frontier:
            for e in range(int(self.colptr[v]), int(self.colptr[v + 1])):
                u = int(self.row[e])
                if u not in index:
                    index[u] = len(nodes)
                    nodes.append(u)
                    new.append(u)
                rows.append(index[u])
                cols.append(index[v])
                edges.append(e)
        frontier = new
    return SamplerOutput(
        node=torch.tensor(nodes), row=torch.tensor(rows), col=torch.tensor(cols), edge=torch.tensor(edges)
    )


@pytest.fixture
def stand_in(monkeypatch):
    from torch_geometric.sampler import NeighborSampler

    monkeypatch.setattr(ns, "backend", lambda: "stand-in")
    monkeypatch.setattr(NeighborSampler, "_sample", all_neighbours)


def node_graph():
    return SOURCES.build({"name": "sbm", "block_size": 20, "in_dim": 4}).train[0]


def test_without_pyg_lib_or_torch_sparse_the_objective_names_both(monkeypatch) -> None:
    monkeypatch.setattr(ns, "backend", lambda: None)
    with pytest.raises(ConfigError, match=r"objective.num_neighbors: .*pyg-lib.*torch-sparse.*full-batch"):
        OBJECTIVES.build({"name": "node_classification", "num_neighbors": [5, 5]})
    OBJECTIVES.build({"name": "node_classification"})  # full-batch needs no backend


@pytest.mark.parametrize("bad", [[], [0], [5, -2]])
def test_num_neighbors_must_give_a_count_per_hop(bad, stand_in) -> None:
    with pytest.raises(ConfigError, match="one count per hop"):
        OBJECTIVES.build({"name": "node_classification", "num_neighbors": bad})


def test_a_sampled_batch_is_the_seeds_two_hop_neighbourhood_and_scores_only_the_seeds(stand_in) -> None:
    from torch_geometric.utils import k_hop_subgraph

    graph = node_graph()
    batch = COLLATORS.build({"name": "graph_batch"})([graph])
    sampling = ns.NeighborSampling([-1, -1], seed_nodes=6)
    torch.manual_seed(0)
    sub = sampling(batch)
    seeds = sub["n_id"][:6]
    assert batch["train_mask"][seeds].all() and seeds.unique().numel() == 6
    assert sub["train_mask"].tolist() == [True] * 6 + [False] * (sub["n_id"].numel() - 6)
    hood, _, _, _ = k_hop_subgraph(seeds, 2, graph.edge_index, num_nodes=graph.num_nodes)
    assert sorted(sub["n_id"].tolist()) == hood.tolist()
    assert torch.equal(sub["x"], graph.x[sub["n_id"]]) and torch.equal(sub["y"], graph.y[sub["n_id"]])
    src, dst = sub["n_id"][sub["edge_index"]]  # every subgraph edge is an edge of the graph
    edges = set(zip(graph.edge_index[0].tolist(), graph.edge_index[1].tolist(), strict=True))
    assert all(e in edges for e in zip(src.tolist(), dst.tolist(), strict=True))
    torch.manual_seed(0)
    assert torch.equal(sampling(batch)["n_id"], sub["n_id"])  # seeded by the torch RNG
    out = OBJECTIVES.build({"name": "node_classification"})
    from toolbox.core.registries import MODELS

    model = MODELS.build(
        {"name": "gnn", "dropout": 0.0}, "model", in_dim=4, num_classes=int(graph.y.max()) + 1
    )
    assert out(model, sub).num_items == 6


def test_gcn_trains_on_sampled_mini_batches_and_evaluates_on_the_full_graph(stand_in, tmp_path) -> None:
    from toolbox.experiment import ExperimentBuilder, load_config

    cfg = load_config(
        [
            "experiment=gcn_cora", "data=sbm", "data.source.block_size=30", "data.source.in_dim=8",
            "~data.dataset", "+data.dataset={name: graphs}", "model.conv=graph_conv/gcn",
            "+objective.num_neighbors=[5,5]", "+objective.seed_nodes=16", "trainer.max_steps=40",
            "trainer.eval_every=10", "trainer.save_every=0", "callbacks=none", "device=cpu",
            "num_threads=1", f"run_dir={tmp_path}",
        ]
    )  # fmt: skip
    parts = ExperimentBuilder.from_config(cfg).build()
    first = parts.trainer.train_step()
    metrics = parts.trainer.fit()
    assert parts.objective.sampling is not None and first["loss"] > 0
    assert metrics["eval/test_accuracy"] > 0.6  # three blocks: chance is 1/3


def test_sampling_refuses_a_gcn_that_caches_its_adjacency(stand_in) -> None:
    from toolbox.core.registries import MODELS

    batch = COLLATORS.build({"name": "graph_batch"})([node_graph()])
    conv = {"name": "graph_conv/gcn", "cached": True}
    model = MODELS.build({"name": "gnn", "conv": conv}, "model", in_dim=4, num_classes=3)
    objective = OBJECTIVES.build({"name": "node_classification", "num_neighbors": [3]})
    with pytest.raises(ConfigError, match="caches its normalised adjacency"):
        objective(model, batch)


@pytest.mark.skipif(not HAS_BACKEND, reason="neither pyg-lib nor torch-sparse is installed")
def test_the_real_backend_samples_at_most_num_neighbors_per_node() -> None:
    graph = node_graph()
    batch = COLLATORS.build({"name": "graph_batch"})([graph])
    sub = ns.NeighborSampling([2], seed_nodes=4)(batch)
    dst = sub["edge_index"][1]
    assert int(torch.bincount(dst, minlength=4)[:4].max()) <= 2
