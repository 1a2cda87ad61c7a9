"""Neighbour-sampled mini-batches of one graph (GraphSAGE-style), through PyG's ``NeighborLoader``.

``NeighborSampling(num_neighbors, seed_nodes)`` turns the full graph of a node task (the batch dict
of the ``graph`` collator) into the subgraph of ``seed_nodes`` training nodes drawn at random (the
torch RNG, so a seeded run draws the same seeds and a resumed run continues them) and their
sampled ``len(num_neighbors)``-hop neighbourhoods. The seeds are the subgraph's first nodes, as in
PyG; its ``train_mask`` marks only them, so the node objective's loss is over the seeds alone,
exactly as ``out[:batch.batch_size]`` in PyG's examples.

PyG's sampler runs on one of two compiled backends, ``pyg-lib`` or ``torch-sparse``. Neither is
part of the default install (pyg-lib is not on PyPI; torch-sparse compiles for about 20 minutes),
so :func:`require_backend` fails with the packages to install when neither imports.
"""

from __future__ import annotations

from typing import Any

import torch

from toolbox.core.errors import ConfigError

INSTALL_HINT = (
    "neighbour sampling (torch_geometric.loader.NeighborLoader) needs PyG's sampler backend, pyg-lib "
    "or torch-sparse, and neither is installed: install pyg-lib from PyG's wheel index for your torch "
    "version (it is not on PyPI; see PyG's installation guide), or `pip install torch-sparse` (builds "
    "from source, ~20 minutes). Or train full-batch: leave objective.num_neighbors unset."
)


def backend() -> str | None:
    """The sampler backend PyG will use (``pyg-lib`` or ``torch-sparse``), or None."""
    import torch_geometric.typing as pyg_typing

    if pyg_typing.WITH_PYG_LIB:
        return "pyg-lib"
    if pyg_typing.WITH_TORCH_SPARSE:
        return "torch-sparse"
    return None


def require_backend() -> str:
    """The backend's name; a ConfigError naming the packages to install when there is none."""
    name = backend()
    if name is None:
        raise ConfigError(f"objective.num_neighbors: {INSTALL_HINT}")
    return name


class NeighborSampling:
    """Full graph in, a sampled subgraph around ``seed_nodes`` random training nodes out.

    Args:
        num_neighbors: neighbours sampled per node at each hop, from the seeds outwards
            (``[25, 10]``: 25 at the first hop, 10 at the second; ``-1`` takes them all).
        seed_nodes: training nodes per mini-batch (all of them when fewer).
    """

    def __init__(self, num_neighbors: list[int], seed_nodes: int = 512) -> None:
        if not num_neighbors or any(int(k) < -1 or int(k) == 0 for k in num_neighbors):
            raise ConfigError(
                f"objective.num_neighbors: {list(num_neighbors)}: give one count per hop, each positive "
                "or -1 (all neighbours), e.g. [25, 10]."
            )
        if seed_nodes < 1:
            raise ConfigError(f"objective.seed_nodes: must be at least 1, got {seed_nodes}.")
        require_backend()
        self.num_neighbors = [int(k) for k in num_neighbors]
        self.seed_nodes = seed_nodes
        self._graph: tuple[Any, Any, Any] | None = None  # (edge_index it was built for, Data, sampler)

    def _prepared(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        """The graph as PyG ``Data`` and its ``NeighborSampler`` (built once per graph: a CSC copy)."""
        edge_index = batch["edge_index"]
        if self._graph is None or self._graph[0] is not edge_index:
            from torch_geometric.data import Data
            from torch_geometric.sampler import NeighborSampler

            data = Data(**{k: v for k, v in batch.items() if torch.is_tensor(v)})
            self._graph = (edge_index, data, NeighborSampler(data, self.num_neighbors))
        return self._graph[1], self._graph[2]

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        from torch_geometric.loader import NeighborLoader

        if "train_mask" not in batch:
            raise ConfigError(
                "objective.num_neighbors: the graph has no train_mask to draw seed nodes from; neighbour "
                "sampling serves one-graph node tasks (planetoid, karate_club, sbm task=node)."
            )
        data, sampler = self._prepared(batch)
        train = batch["train_mask"].bool().nonzero().view(-1)
        seeds = train[torch.randperm(train.numel(), device=train.device)[: self.seed_nodes]]
        loader = NeighborLoader(
            data, self.num_neighbors, input_nodes=seeds, batch_size=seeds.numel(), neighbor_sampler=sampler
        )
        sub = next(iter(loader))
        out = {k: v for k, v in sub.to_dict().items() if torch.is_tensor(v)}
        mask = torch.zeros(sub.num_nodes, dtype=torch.bool, device=train.device)
        mask[: sub.batch_size] = True  # the seeds come first; only they are scored
        out["train_mask"] = mask
        return out
