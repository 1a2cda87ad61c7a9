"""``sbm``: generated stochastic-block-model graphs, for node or graph classification."""

from __future__ import annotations

from typing import Literal

import torch

from toolbox.core.bounds import AtLeastOne, Fraction, NonNegativeFloat
from toolbox.core.errors import DataError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits
from toolbox.data.graphs import graph_set_splits, node_splits


@SOURCES.register("sbm")
def sbm(
    task: Literal["node", "graph"] = "node",
    num_blocks: AtLeastOne = 3,
    block_size: AtLeastOne = 50,
    p_in: Fraction = 0.2,
    p_out: Fraction = 0.02,
    in_dim: AtLeastOne = 8,
    feature_noise: NonNegativeFloat = 1.0,
    num_graphs: AtLeastOne = 200,
    val_fraction: Fraction = 0.1,
    test_fraction: Fraction = 0.2,
    seed: int = 0,
) -> Splits:
    """Graphs drawn from a stochastic block model (``torch_geometric.utils.stochastic_blockmodel_graph``).

    ``node``: one graph of ``num_blocks`` blocks; a node's class is its block, its features the
    block's random centre plus Gaussian noise of scale ``feature_noise``; 20 % of the nodes train, 20 %
    validate, the rest test (a seeded draw). ``graph``: ``num_graphs`` graphs of ``num_blocks`` blocks,
    each of one of two classes: class 0 draws within-block edges with ``p_in``, class 1 with
    ``2 * p_in`` (so a model must read the structure); node features are pure noise plus a constant.

    Args:
        task: ``node`` (classify nodes of one graph) or ``graph`` (classify whole graphs).
        num_blocks: communities per graph.
        block_size: nodes per community.
        p_in: probability of an edge inside a community.
        p_out: probability of an edge between communities.
        in_dim: node feature size.
        feature_noise: standard deviation of the Gaussian noise on the features.
        num_graphs: graphs of the graph task.
        val_fraction: graph task: share of the graphs for validation.
        test_fraction: graph task: share of the graphs for the test.
        seed: seed of the draw.
    """
    if not (0 <= p_out <= 1 and 0 <= p_in <= 0.5):
        raise DataError(
            f"sbm: need 0 <= p_out <= 1 and 0 <= p_in <= 0.5 (class 1 uses 2 * p_in), got {p_in}, {p_out}."
        )
    from torch_geometric.data import Data
    from torch_geometric.utils import stochastic_blockmodel_graph

    with torch.random.fork_rng(devices=[]):  # the PyG generator draws from torch's global RNG
        torch.manual_seed(seed)
        sizes = [block_size] * num_blocks
        y_node = torch.arange(num_blocks).repeat_interleave(block_size)
        n = num_blocks * block_size

        def probs(inside: float) -> list[list[float]]:
            return [[inside if i == j else p_out for j in range(num_blocks)] for i in range(num_blocks)]

        if task == "node":
            centres = torch.randn(num_blocks, in_dim)
            x = centres[y_node] + feature_noise * torch.randn(n, in_dim)
            graph = Data(x=x, edge_index=stochastic_blockmodel_graph(sizes, probs(p_in)), y=y_node)
            order = torch.randperm(n)
            for name, lo, hi in (("train", 0, 0.2), ("val", 0.2, 0.4), ("test", 0.4, 1.0)):
                mask = torch.zeros(n, dtype=torch.bool)
                mask[order[int(lo * n) : int(hi * n)]] = True
                graph[f"{name}_mask"] = mask
            return node_splits(graph, num_blocks)
        graphs = []
        for _ in range(num_graphs):
            label = int(torch.randint(0, 2, ()).item())
            x = torch.cat([torch.ones(n, 1), feature_noise * torch.randn(n, in_dim - 1)], dim=1)
            edges = stochastic_blockmodel_graph(sizes, probs(p_in * (1 + label)))
            graphs.append(Data(x=x, edge_index=edges, y=torch.tensor([label])))
    return graph_set_splits(graphs, val_fraction, test_fraction, seed, num_classes=2)
