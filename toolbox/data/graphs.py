"""Graph data: what the graph sources return and how it reaches the model.

A graph source (``planetoid``, ``tu_dataset``, ``karate_club``, ``sbm``) returns ``Splits`` whose
records are ``torch_geometric.data.Data`` graphs, and facts ``in_dim`` and ``num_classes``:

- **one graph, node task** (Planetoid, KarateClub, ``sbm(task=node)``): ``train`` and ``test`` are the
  same graph, whose boolean node masks ``train_mask``, ``val_mask``, ``test_mask`` say which nodes
  each split scores (the public Planetoid split is in the files);
- **a set of graphs, graph task** (TUDataset, ``sbm(task=graph)``): ``train`` holds the training
  graphs, ``test`` the validation and test graphs; each graph carries one-element masks
  ``train_mask``/``val_mask``/``test_mask`` (batched, one entry per graph).

The ``graphs`` dataset factory applies PyG transforms (and the link split of link prediction);
the ``graph`` collator batches graphs into a dict of tensors (``x``, ``edge_index``, ``y``, the
masks, ``batch``), which the trainer moves to the device like any batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from toolbox.core.errors import DataError
from toolbox.data.base import Splits

SPLITS = ("train", "val", "test")


def is_graph(record: Any) -> bool:
    """Whether a record is a PyG graph (``Data``) rather than a dict of plain values."""
    try:
        from torch_geometric.data import Data
    except ImportError:  # pragma: no cover - torch-geometric is in requirements.lock
        return False
    return isinstance(record, Data)


def node_splits(graph: Any, num_classes: int | None = None) -> Splits:
    """Splits of a one-graph node task: the graph (with its masks) as both train and test."""
    missing = [f"{s}_mask" for s in SPLITS if f"{s}_mask" not in graph]
    if missing:
        raise DataError(f"the graph lacks the node masks {', '.join(missing)}: a node task needs all three.")
    if num_classes is None:
        num_classes = int(graph.y.max()) + 1
    return Splits([graph], [graph], {"in_dim": int(graph.num_node_features), "num_classes": num_classes})


def graph_set_splits(
    graphs: Sequence[Any],
    val_fraction: float,
    test_fraction: float,
    seed: int,
    num_classes: int | None = None,
) -> Splits:
    """Splits of a graph task: a seeded permutation of ``graphs`` cut into train / val / test; every
    graph gets the three one-element masks."""
    n = len(graphs)
    if not 0 <= val_fraction < 1 or not 0 < test_fraction < 1 or val_fraction + test_fraction >= 1:
        raise DataError(
            f"val_fraction={val_fraction} and test_fraction={test_fraction}: each in [0, 1), test > 0, "
            "and together below 1."
        )
    num_val, num_test = round(n * val_fraction), max(1, round(n * test_fraction))
    if n - num_val - num_test < 1:
        raise DataError(f"{n} graphs are too few for a train, validation and test split; add graphs.")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    split_of = {}
    for rank, i in enumerate(order):
        split_of[i] = "val" if rank < num_val else "test" if rank < num_val + num_test else "train"
    out: dict[str, list[Any]] = {s: [] for s in SPLITS}
    for i, g in enumerate(graphs):
        g = g.clone()
        for s in SPLITS:
            g[f"{s}_mask"] = torch.tensor([split_of[i] == s])
        out[split_of[i]].append(g)
    if num_classes is None:
        num_classes = int(max(int(g.y.max()) for g in graphs)) + 1
    in_dim = int(graphs[0].num_node_features)
    return Splits(out["train"], out["val"] + out["test"], {"in_dim": in_dim, "num_classes": num_classes})


# the data stage's file: both splits in one torch.save, so a graph shared by train and test is stored once
GRAPHS_FILE = "graphs.pt"


def save_graphs(path: Any, splits: Splits) -> None:
    """Write both splits' graphs as dicts of tensors (loads with ``torch.load(weights_only=True)``)."""
    content = {
        name: [g.to_dict() for g in records]
        for name, records in (("train", splits.train), ("test", splits.test))
    }
    with open(path, "wb") as f:
        torch.save(content, f)


def load_graphs(path: Any) -> tuple[list[Any], list[Any]]:
    """The train and test graphs ``save_graphs`` wrote."""
    from torch_geometric.data import Data

    content = torch.load(path, map_location="cpu", weights_only=True)
    return [Data.from_dict(d) for d in content["train"]], [Data.from_dict(d) for d in content["test"]]
