"""``karate_club``: Zachary's karate club, the four-community version PyG ships (no file needed)."""

from __future__ import annotations

import torch

from toolbox.core.bounds import NonNegativeInt
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits
from toolbox.data.graphs import node_splits


@SOURCES.register("karate_club")
def karate_club(num_val: NonNegativeInt = 10, seed: int = 0) -> Splits:
    """34 members, 4 communities, one-hot node features (``torch_geometric.datasets.KarateClub``).

    PyG labels one member per community for training; of the other 30, ``num_val`` (a seeded draw)
    validate and the rest test.

    Args:
        num_val: unlabelled members used for validation.
        seed: seed of the validation draw.
    """
    from torch_geometric.datasets import KarateClub

    graph = KarateClub()[0]
    rest = (~graph.train_mask).nonzero().flatten()
    rest = rest[torch.randperm(rest.numel(), generator=torch.Generator().manual_seed(seed))]
    graph.val_mask = torch.zeros_like(graph.train_mask)
    graph.val_mask[rest[:num_val]] = True
    graph.test_mask = ~(graph.train_mask | graph.val_mask)
    return node_splits(graph)
