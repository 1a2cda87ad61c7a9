"""``graph``: batch PyG graphs into one disjoint graph, as a dict of tensors."""

from __future__ import annotations

from typing import Any

import torch

from toolbox.core.registries import COLLATORS


@COLLATORS.register("graph_batch")
class GraphCollator:
    """Graphs → ``{x, edge_index, y, masks, ..., batch, ptr}`` (``torch_geometric.data.Batch``).

    A batch of one graph (full-batch training on one graph) is that graph's tensors as they are,
    without a copy and without ``batch`` (a single graph needs none).
    """

    def __call__(self, examples: list[Any]) -> dict[str, torch.Tensor]:
        if len(examples) == 1:
            return examples[0].to_dict()
        from torch_geometric.data import Batch

        return Batch.from_data_list(examples).to_dict()
