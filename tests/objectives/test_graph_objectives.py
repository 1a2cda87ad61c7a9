"""Graph objectives: the losses against torch's, the items of each split, negative sampling."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolbox.core.device import seed_everything
from toolbox.core.errors import DataError
from toolbox.core.registries import COLLATORS, DATASETS, MODELS, OBJECTIVES, SOURCES
from toolbox.objectives.base import GraphObjective, SupervisedObjective

pytest.importorskip("torch_geometric")


def node_batch():
    return COLLATORS.build({"name": "graph_batch"})(
        SOURCES.build({"name": "sbm", "block_size": 20, "in_dim": 4}).train
    )


def model(task: str = "node", **settings):
    torch.manual_seed(0)
    return MODELS.build(
        {"name": "gnn", "task": task, "dropout": 0.0, **settings}, "model", in_dim=4, num_classes=3
    )


def test_graph_objectives_are_supervised_so_the_supervised_trainer_takes_them() -> None:
    for name in ("node_classification", "link_prediction", "graph_classification"):
        obj = OBJECTIVES.build({"name": name})
        assert (
            isinstance(obj, GraphObjective) and isinstance(obj, SupervisedObjective) and obj.family == "graph"
        )


def test_node_classification_is_the_cross_entropy_of_the_masked_nodes() -> None:
    batch, net = node_batch(), model()
    obj = OBJECTIVES.build({"name": "node_classification"})
    out = obj(net, batch)
    logits, m = net(batch["x"], batch["edge_index"]), batch["train_mask"]
    torch.testing.assert_close(out.loss_sum, F.cross_entropy(logits[m], batch["y"][m], reduction="sum"))
    assert out.num_items == int(m.sum()) == 12
    assert out.metrics["correct"] == float((logits[m].argmax(-1) == batch["y"][m]).sum())
    split = obj.predict(net, batch, ("val", "test"))
    assert [s.shape[0] for s, _ in split.values()] == [12, 36]
    with pytest.raises(DataError, match="the graph batch has no 'val_mask'"):
        obj.predict(net, {k: v for k, v in batch.items() if k != "val_mask"}, ("val",))


def test_link_prediction_scores_positives_and_fresh_negatives() -> None:
    graph = SOURCES.build({"name": "sbm", "block_size": 20, "in_dim": 4}).train
    data = DATASETS.build({"name": "graphs", "link_split": {"num_val": 0.1, "num_test": 0.1}})(graph)
    batch, net = COLLATORS.build({"name": "graph_batch"})(data), model("edge", hidden_dims=[8, 8])
    obj = OBJECTIVES.build({"name": "link_prediction", "negatives": 2.0})
    positives = int(batch["train_label_mask"].sum())
    seed_everything(1)  # PyG's negative sampling draws from torch, numpy and random
    ((scores, labels),) = obj.predict(net, batch, ("train",)).values()
    assert labels.tolist() == [1.0] * positives + [0.0] * (2 * positives)
    seed_everything(1)
    out = obj(net, batch)
    torch.testing.assert_close(
        out.loss_sum, F.binary_cross_entropy_with_logits(scores, labels, reduction="sum")
    )
    seed_everything(2)
    ((again, _),) = obj.predict(net, batch, ("train",)).values()
    assert not torch.equal(again, scores)  # negatives drawn anew
    val = obj.predict(net, batch, ("val", "test"))
    assert sorted(val["val"][1].unique().tolist()) == [0.0, 1.0]


def test_graph_classification_scores_the_graphs_of_a_split() -> None:
    splits = SOURCES.build({"name": "sbm", "task": "graph", "num_graphs": 20, "block_size": 5, "in_dim": 4})
    batch = COLLATORS.build({"name": "graph_batch"})(list(splits.test))
    torch.manual_seed(0)
    net = MODELS.build({"name": "gnn", "task": "graph", "dropout": 0.0}, "model", in_dim=4, num_classes=2)
    obj = OBJECTIVES.build({"name": "graph_classification"})
    out = obj.predict(net, batch, ("val", "test"))
    logits = net(batch["x"], batch["edge_index"], batch=batch["batch"])
    assert out["val"][0].shape[0] + out["test"][0].shape[0] == len(splits.test) == logits.shape[0]
    torch.testing.assert_close(out["test"][0], logits[batch["test_mask"]])
