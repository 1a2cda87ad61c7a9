"""Graph objectives (family ``graph``): node classification, link prediction, graph classification.

Each scores the items of one or more splits from one forward pass (``predict``), so the training
loss (``train`` items) and the evaluator's validation and test metrics share the code. Items are
nodes (``{split}_mask`` over nodes), node pairs (``{split}_label_mask`` over ``edge_label_index``)
or graphs (``{split}_mask``, one entry per graph); see ``toolbox.data.graphs``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import OBJECTIVES
from toolbox.objectives.base import GraphObjective, LossOutput


def _mask(batch: dict[str, Any], key: str, what: str) -> torch.Tensor:
    if key not in batch:
        raise DataError(
            f"the graph batch has no '{key}' (keys: {', '.join(sorted(batch))}); {what} needs it: use a "
            "graph source that splits its items (planetoid, karate_club, sbm, tu_dataset)."
        )
    return batch[key].bool()


class _Classification(GraphObjective):
    """Cross entropy of the logits of the split's items (nodes or graphs) against ``y``."""

    what = "classification"

    def __init__(self, label_smoothing: float = 0.0) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError("objective.label_smoothing must be in [0, 1)")
        self.label_smoothing = label_smoothing

    def logits(self, model: Any, batch: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    def predict(
        self, model: Any, batch: dict[str, Any], splits: tuple[str, ...]
    ) -> dict[str, tuple[Any, Any]]:
        logits = self.logits(model, batch)
        y = batch["y"].view(-1)
        out = {}
        for split in splits:
            mask = _mask(batch, f"{split}_mask", self.what)
            out[split] = (logits[mask], y[mask])
        return out

    def loss_sum(self, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(scores.float(), targets, reduction="sum", label_smoothing=self.label_smoothing)

    def num_correct(self, scores: torch.Tensor, targets: torch.Tensor) -> float:
        with torch.no_grad():
            return float((scores.argmax(-1) == targets).sum())


@OBJECTIVES.register("node_classification")
class NodeClassification(_Classification):
    """Cross entropy over the nodes of a split (the split's node mask), from
    ``model(x, edge_index)`` logits per node (``gnn`` with ``task: node``).

    Full-batch by default (each step scores every training node). With ``num_neighbors`` each
    training step is a neighbour-sampled mini-batch (``toolbox.data.neighbor_sampling``, PyG's
    ``NeighborLoader``): ``seed_nodes`` random training nodes and their sampled neighbourhoods,
    the loss over the seeds; evaluation stays full-graph. Sampling needs ``pyg-lib`` or
    ``torch-sparse``; without either, building the objective fails naming them.

    Args:
        label_smoothing: mass moved uniformly over the classes (0 = plain cross entropy).
        num_neighbors: neighbours sampled per node at each hop (``[25, 10]``; -1 takes all);
            None trains full-batch.
        seed_nodes: training nodes per sampled mini-batch.
    """

    what = "node classification"

    def __init__(
        self, label_smoothing: float = 0.0, num_neighbors: list[int] | None = None, seed_nodes: int = 512
    ) -> None:
        super().__init__(label_smoothing)
        self.sampling = None
        self._checked = False
        if num_neighbors is not None:
            from toolbox.data.neighbor_sampling import NeighborSampling

            self.sampling = NeighborSampling(list(num_neighbors), seed_nodes)

    def __call__(self, model: Any, batch: dict[str, Any]) -> LossOutput:
        if self.sampling is not None:
            if not self._checked:  # once: a cached adjacency would be the first subgraph's forever
                cached = [type(m).__name__ for m in model.modules() if getattr(m, "cached", False)]
                if cached:
                    raise ConfigError(
                        f"objective.num_neighbors: the model's {cached[0]} caches its normalised adjacency "
                        "(cached: true), but every sampled subgraph is another graph; drop cached from "
                        "the conv spec (model.conv=graph_conv/gcn)."
                    )
                self._checked = True
            batch = self.sampling(batch)
        return super().__call__(model, batch)

    def logits(self, model: Any, batch: dict[str, Any]) -> torch.Tensor:
        return model(batch["x"], batch["edge_index"])


@OBJECTIVES.register("graph_classification")
class GraphClassification(_Classification):
    """Cross entropy over the graphs of a split, from ``model(x, edge_index, batch)`` logits per
    graph (``gnn`` with ``task: graph``).

    Args:
        label_smoothing: mass moved uniformly over the classes (0 = plain cross entropy).
    """

    what = "graph classification"

    def logits(self, model: Any, batch: dict[str, Any]) -> torch.Tensor:
        return model(batch["x"], batch["edge_index"], batch=batch.get("batch"))


@OBJECTIVES.register("link_prediction")
class LinkPrediction(GraphObjective):
    """Binary cross entropy of node-pair scores ``model(x, edge_index, edge_label_index=pairs)``
    (``gnn`` with ``task: edge``): the split's labelled pairs; for ``train``, its positive pairs
    and ``negatives`` times as many non-edges sampled anew each step
    (``torch_geometric.utils.negative_sampling`` against the message-passing edges).

    Args:
        negatives: sampled non-edges per training positive.
    """

    accuracy_name = "accuracy"

    def __init__(self, negatives: float = 1.0) -> None:
        if negatives <= 0:
            raise ValueError("objective.negatives must be positive")
        self.negatives = negatives

    def predict(
        self, model: Any, batch: dict[str, Any], splits: tuple[str, ...]
    ) -> dict[str, tuple[Any, Any]]:
        pairs, labels, sizes = [], [], []
        for split in splits:
            mask = _mask(batch, f"{split}_label_mask", "link prediction (data.dataset.link_split)")
            index, label = batch["edge_label_index"][:, mask], batch["edge_label"][mask].float()
            if split == "train":
                from torch_geometric.utils import negative_sampling

                neg = negative_sampling(
                    batch["edge_index"],
                    num_nodes=batch["x"].size(0),
                    num_neg_samples=int(round(index.size(1) * self.negatives)),
                )
                index = torch.cat([index, neg], dim=1)
                label = torch.cat([label, label.new_zeros(neg.size(1))])
            pairs.append(index)
            labels.append(label)
            sizes.append(label.numel())
        scores = model(batch["x"], batch["edge_index"], edge_label_index=torch.cat(pairs, dim=1))
        return {split: (s, t) for split, s, t in zip(splits, scores.split(sizes), labels, strict=True)}

    def loss_sum(self, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(scores.float(), targets, reduction="sum")

    def num_correct(self, scores: torch.Tensor, targets: torch.Tensor) -> float:
        with torch.no_grad():
            return float(((scores > 0).float() == targets).sum())
