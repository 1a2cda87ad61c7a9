"""Graph sources, the graphs factory, the graph collator and the prepared graph file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import COLLATORS, DATASETS, SOURCES

pytest.importorskip("torch_geometric")

REPO = Path(__file__).resolve().parents[2]
PLANETOID = REPO.parent / "shared" / "data" / "planetoid"
needs_cora = pytest.mark.skipif(
    not (PLANETOID / "Cora" / "raw" / "ind.cora.x").is_file(), reason="../shared/data/planetoid/Cora absent"
)


@needs_cora
def test_planetoid_reads_the_public_cora_split_from_the_local_root() -> None:
    splits = SOURCES.build({"name": "planetoid", "dataset": "cora", "root": str(PLANETOID)})
    g = splits.train[0]
    assert splits.test[0] is g and splits.facts == {"in_dim": 1433, "num_classes": 7}
    assert (g.num_nodes, g.num_edges) == (2708, 10556)
    assert [int(g[f"{s}_mask"].sum()) for s in ("train", "val", "test")] == [140, 500, 1000]
    assert not list((PLANETOID / "Cora").glob("processed"))  # read, nothing written
    full = SOURCES.build({"name": "planetoid", "root": str(PLANETOID), "split": "full"}).train[0]
    assert int(full.train_mask.sum()) == 2708 - 1500


def test_planetoid_names_the_files_it_needs(tmp_path) -> None:
    with pytest.raises(DataError, match="is not a Planetoid data set; choose one of Cora, CiteSeer, PubMed"):
        SOURCES.build({"name": "planetoid", "dataset": "Corra"})
    with pytest.raises(DataError, match=r"CiteSeer/raw has no ind.citeseer.\* files and download=false"):
        SOURCES.build({"name": "planetoid", "dataset": "CiteSeer", "root": str(tmp_path), "download": False})


def write_tu(root: Path, name: str = "TINY") -> None:
    """A TUDataset-format folder: 6 graphs (triangles are class 1, 3-paths class 0), node labels."""
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    edges, indicator, node_labels, labels = [], [], [], []
    node = 1
    for g in range(6):
        triangle = g % 2 == 1
        pairs = [(0, 1), (1, 2)] + ([(2, 0)] if triangle else [])
        for a, b in pairs:
            edges += [(node + a, node + b), (node + b, node + a)]
        indicator += [g + 1] * 3
        node_labels += [0, 1, g % 3]
        labels.append(int(triangle))
        node += 3
    (raw / f"{name}_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (raw / f"{name}_graph_indicator.txt").write_text("".join(f"{i}\n" for i in indicator))
    (raw / f"{name}_graph_labels.txt").write_text("".join(f"{y}\n" for y in labels))
    (raw / f"{name}_node_labels.txt").write_text("".join(f"{y}\n" for y in node_labels))


def test_tu_dataset_reads_a_tudataset_folder_and_splits_the_graphs(tmp_path) -> None:
    write_tu(tmp_path)
    spec = {
        "name": "tu_dataset",
        "dataset": "TINY",
        "root": str(tmp_path),
        "val_fraction": 0.2,
        "test_fraction": 0.2,
    }
    splits = SOURCES.build(spec)
    assert splits.facts == {"in_dim": 3, "num_classes": 2}  # node labels 0..2 one-hot
    assert (len(splits.train), len(splits.test)) == (4, 2)
    assert [int(g.val_mask) for g in splits.test].count(1) == 1
    assert all(g.num_nodes == 3 and g.x.sum() == 3 for g in splits.train + splits.test)
    edges = {int(g.y): g.num_edges for g in splits.train + splits.test}
    assert edges == {0: 4, 1: 6}
    assert not (tmp_path / "TINY" / "processed").exists()
    with pytest.raises(DataError, match="has no NOPE_A.txt and download=false"):
        SOURCES.build({**spec, "dataset": "NOPE", "download": False})


def test_karate_club_and_sbm_split_their_nodes() -> None:
    karate = SOURCES.build({"name": "karate_club", "num_val": 10})
    g = karate.train[0]
    assert karate.facts == {"in_dim": 34, "num_classes": 4}
    assert [int(g[f"{s}_mask"].sum()) for s in ("train", "val", "test")] == [4, 10, 20]
    node = SOURCES.build({"name": "sbm", "num_blocks": 3, "block_size": 20, "in_dim": 4})
    g = node.train[0]
    assert node.facts == {"in_dim": 4, "num_classes": 3} and g.num_nodes == 60
    assert int((g.train_mask | g.val_mask | g.test_mask).sum()) == 60
    again = SOURCES.build({"name": "sbm", "num_blocks": 3, "block_size": 20, "in_dim": 4}).train[0]
    assert torch.equal(again.edge_index, g.edge_index)  # seeded
    graphs = SOURCES.build({"name": "sbm", "task": "graph", "num_graphs": 40, "block_size": 10})
    assert graphs.facts["num_classes"] == 2 and len(graphs.train) + len(graphs.test) == 40
    dense = [g.num_edges for g in graphs.train if int(g.y) == 1]
    sparse = [g.num_edges for g in graphs.train if int(g.y) == 0]
    assert sum(dense) / len(dense) > 1.5 * sum(sparse) / len(sparse)


def test_graphs_factory_applies_pyg_transforms_and_the_link_split() -> None:
    g = SOURCES.build({"name": "sbm", "block_size": 30, "in_dim": 4}).train[0]
    out = DATASETS.build({"name": "graphs", "transforms": ["NormalizeFeatures"]})([g])[0]
    assert out is not g and torch.allclose(out.x.abs().sum(1), torch.ones(g.num_nodes))
    with pytest.raises(
        ConfigError,
        match="'NormalizeFeature' is not a torch_geometric.transforms class. Did you mean 'NormalizeFeatures'",
    ):
        DATASETS.build({"name": "graphs", "transforms": ["NormalizeFeature"]})
    factory = DATASETS.build({"name": "graphs", "link_split": {"num_val": 0.1, "num_test": 0.2}})
    a, b = factory([g])[0], factory([g])[0]
    assert torch.equal(a.edge_label_index, b.edge_label_index)  # the same split every time
    masks = [a[f"{s}_label_mask"] for s in ("train", "val", "test")]
    assert (
        int(sum(m.long() for m in masks).max()) == 1
        and int(sum(m.sum() for m in masks)) == a.edge_label.numel()
    )
    undirected = g.num_edges // 2
    assert int(masks[2].sum()) == 2 * round(0.2 * undirected)  # positives and as many negatives
    assert a.edge_label[masks[0]].eq(1).all() and a.num_edges < g.num_edges  # held-out edges pass no messages


def test_graph_collator_keeps_one_graph_as_is_and_batches_many() -> None:
    graphs = SOURCES.build({"name": "sbm", "task": "graph", "num_graphs": 10, "block_size": 5}).train
    collate = COLLATORS.build({"name": "graph_batch"})
    one = collate(graphs[:1])
    assert one["x"] is graphs[0].x and "batch" not in one
    many = collate(graphs[:3])
    assert many["batch"].tolist() == [0] * 15 + [1] * 15 + [2] * 15 and many["train_mask"].shape == (3,)


def test_prepared_graphs_round_trip_and_store_a_shared_graph_once(tmp_path) -> None:
    from toolbox.data.prepared import write_prepared

    splits = SOURCES.build({"name": "sbm", "block_size": 200, "in_dim": 64})
    write_prepared(tmp_path / "data", splits, None)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["facts.json", "graphs.pt"]
    back = SOURCES.build({"name": "prepared", "path": str(tmp_path / "data")})
    assert back.facts == splits.facts
    for key in ("x", "edge_index", "y", "train_mask", "test_mask"):
        assert torch.equal(back.test[0][key], splits.test[0][key])
    one_graph = sum(t.numel() * t.element_size() for _, t in splits.train[0])
    assert (tmp_path / "data" / "graphs.pt").stat().st_size < 1.2 * one_graph


def test_sparse_features_store_x_as_coo_after_the_transforms_and_survive_the_data_file(tmp_path) -> None:
    from toolbox.data.base import Splits
    from toolbox.data.graphs import load_graphs, save_graphs

    g = SOURCES.build({"name": "sbm", "block_size": 20, "in_dim": 8}).train[0]
    g.x = g.x * (g.x > 0.5)  # mostly zeros, like bag-of-words
    factory = DATASETS.build({"name": "graphs", "transforms": ["NormalizeFeatures"], "sparse_features": True})
    out = factory([g])[0]
    expected = DATASETS.build({"name": "graphs", "transforms": ["NormalizeFeatures"]})([g])[0].x
    assert out.x.layout == torch.sparse_coo and out.x.is_coalesced() and not g.x.is_sparse
    assert torch.equal(out.x.to_dense(), expected)  # normalised first, then stored sparse
    save_graphs(tmp_path / "graphs.pt", Splits([out], [out], {}))
    back = load_graphs(tmp_path / "graphs.pt")[0][0]
    assert back.x.is_sparse and torch.equal(back.x.to_dense(), expected)
