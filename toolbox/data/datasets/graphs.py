"""``graphs``: graph records through PyG transforms, and the link split of link prediction."""

from __future__ import annotations

import difflib
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from toolbox.core.errors import ConfigError, DataError
from toolbox.core.registries import DATASETS
from toolbox.data.base import DatasetFactory
from toolbox.data.graphs import is_graph


@DATASETS.register("graphs")
class Graphs(DatasetFactory):
    """PyG graphs in, PyG graphs out: each transformed by ``transforms`` (then link-split).

    Args:
        transforms: ``torch_geometric.transforms`` applied in order, each a class name
            (``NormalizeFeatures``) or a mapping ``{name: ToUndirected, reduce: mean}`` of its
            keyword arguments.
        link_split: for link prediction, ``{num_val: 0.05, num_test: 0.1}`` (fractions or counts of
            the edges): PyG's ``RandomLinkSplit`` (undirected, seeded) holds out validation and test
            edges, each with as many sampled non-edges. The graph then passes messages over the
            training edges only (``edge_index``), and scores ``edge_label_index`` with labels
            ``edge_label`` and masks ``train_label_mask``/``val_label_mask``/``test_label_mask``
            (the training pairs are positives; the objective samples their negatives each step).
        seed: seed of the link split (the same graph always splits the same way).
        sparse_features: store the node features ``x`` as a coalesced ``torch.sparse_coo`` tensor
            (after the transforms). Bag-of-words features (Planetoid: 1.3 % non-zero) then cost a
            sparse product in the first convolution and dropout over the non-zeros only (``gnn``):
            the same model and the same distribution of dropout masks (a zero stays zero whether
            dropped or not), several times faster per step. Only for convolutions that begin with
            a linear map of ``x`` (``graph_conv/gcn``, ``graph_conv/gat``).
    """

    def __init__(
        self,
        transforms: list[str | dict[str, Any]] = [],  # noqa: B006 - a config default, never mutated
        link_split: dict[str, float] | None = None,
        seed: int = 0,
        sparse_features: bool = False,
    ) -> None:
        self.transforms = [_transform(t, i) for i, t in enumerate(transforms)]
        if link_split is not None:
            bad = set(link_split) - {"num_val", "num_test"}
            if bad:
                raise ConfigError(
                    f"data.dataset.link_split.{sorted(bad)[0]}: unknown key; valid keys: num_val, num_test."
                )
        self.link_split = link_split
        self.seed = seed
        self.sparse_features = sparse_features

    def __call__(self, records: Sequence[Any]) -> list[Any]:
        out = []
        for i, graph in enumerate(records):
            if not is_graph(graph):
                raise DataError(
                    f"record {i} is a {type(graph).__name__}, not a PyG graph; the graphs dataset reads a "
                    "graph source (planetoid, tu_dataset, karate_club, sbm)."
                )
            graph = graph.clone()
            for t in self.transforms:
                graph = t(graph)
            if self.link_split is not None:
                graph = self._split_links(graph)
            if self.sparse_features and getattr(graph, "x", None) is not None and not graph.x.is_sparse:
                graph.x = graph.x.to_sparse_coo().coalesce()
            out.append(graph)
        return out

    def _split_links(self, graph: Any) -> Any:
        from torch_geometric.transforms import RandomLinkSplit

        split = RandomLinkSplit(
            num_val=self.link_split.get("num_val", 0.05),
            num_test=self.link_split.get("num_test", 0.1),
            is_undirected=True,
            add_negative_train_samples=False,
        )
        # PyG's negative sampling draws from torch, numpy and Python's random: seed all three (and
        # put them back), so the train and test graphs of a run split the same way
        py_state, np_state = random.getstate(), np.random.get_state()
        with torch.random.fork_rng(devices=[]):
            random.seed(self.seed)
            np.random.seed(self.seed)
            torch.manual_seed(self.seed)
            try:
                train, val, test = split(graph)
            finally:
                random.setstate(py_state)
                np.random.set_state(np_state)
        labelled = {"train": train, "val": val, "test": test}
        out = train.clone()
        out.edge_label_index = torch.cat([g.edge_label_index for g in labelled.values()], dim=1)
        out.edge_label = torch.cat([g.edge_label for g in labelled.values()])
        start = 0
        for name, g in labelled.items():
            mask = torch.zeros(out.edge_label.numel(), dtype=torch.bool)
            mask[start : start + g.edge_label.numel()] = True
            out[f"{name}_label_mask"] = mask
            start += g.edge_label.numel()
        return out


def _transform(spec: str | dict[str, Any], i: int) -> Any:
    import torch_geometric.transforms as T

    if isinstance(spec, str):
        spec = {"name": spec}
    spec = dict(spec)
    name = spec.pop("name", None)
    cls = getattr(T, name, None) if isinstance(name, str) else None
    if not isinstance(cls, type):
        valid = sorted(n for n in T.__all__ if n[0].isupper())
        close = difflib.get_close_matches(str(name), valid, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"data.dataset.transforms[{i}]: '{name}' is not a torch_geometric.transforms class.{hint}"
        )
    try:
        return cls(**spec)
    except TypeError as e:
        raise ConfigError(f"data.dataset.transforms[{i}] ({name}): {e}.") from None
