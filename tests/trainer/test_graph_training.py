"""Graph models trained by the supervised trainer: the same steps as a plain PyG loop, model
selection on validation, the exported model, and a trained GIN on generated graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from toolbox.experiment import ExperimentBuilder, load_config

pytest.importorskip("torch_geometric")

REPO = Path(__file__).resolve().parents[2]
PLANETOID = REPO.parent / "shared" / "data" / "planetoid"
QUIET = ["callbacks=none", "device=cpu", "num_threads=1"]


@pytest.mark.skipif(not (PLANETOID / "Cora" / "raw" / "ind.cora.x").is_file(), reason="no local Cora")
def test_gcn_cora_steps_equal_a_plain_pyg_training_loop(tmp_path) -> None:
    """experiment=gcn_cora is PyG's examples/gcn.py: with dense features (the loop's dropout draws)
    and no adjacency cache, the first steps' losses agree to float rounding."""
    from torch_geometric.io import read_planetoid_data
    from torch_geometric.nn import GCNConv
    from torch_geometric.transforms import NormalizeFeatures

    from toolbox.core.device import seed_everything

    dense = ["data.dataset.sparse_features=false", "model.conv=graph_conv/gcn"]
    cfg = load_config(
        ["experiment=gcn_cora", f"data.source.root={PLANETOID}", f"run_dir={tmp_path}", *dense, *QUIET]
    )
    trainer = ExperimentBuilder.from_config(cfg).build().trainer
    ours = [trainer.train_step()["loss"] for _ in range(4)]

    data = NormalizeFeatures()(read_planetoid_data(str(PLANETOID / "Cora" / "raw"), "cora"))
    seed_everything(0)
    conv1, conv2 = GCNConv(1433, 16), GCNConv(16, 7)
    opt = torch.optim.Adam(
        [
            {"params": conv1.parameters(), "weight_decay": 5e-4},
            {"params": conv2.parameters(), "weight_decay": 0},
        ],
        lr=0.01,
    )
    theirs = []
    for _ in range(4):
        opt.zero_grad()
        x = F.dropout(data.x, 0.5, training=True)
        x = F.dropout(conv1(x, data.edge_index).relu(), 0.5, training=True)
        loss = F.cross_entropy(conv2(x, data.edge_index)[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        theirs.append(loss.item())
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert ours[-1] < ours[0]


@pytest.mark.skipif(not (PLANETOID / "Cora" / "raw" / "ind.cora.x").is_file(), reason="no local Cora")
def test_gcn_cora_as_shipped_keeps_sparse_features_and_matches_dense_without_dropout(tmp_path) -> None:
    """The shipped recipe (sparse features, cached adjacency) is the dense model: with dropout off
    the two give the same losses step by step."""
    base = ["experiment=gcn_cora", f"data.source.root={PLANETOID}", "model.dropout=0.0", *QUIET]
    shipped = ExperimentBuilder.from_config(load_config([*base, f"run_dir={tmp_path}/a"])).build()
    assert shipped.train_data[0].x.is_sparse
    dense = ["data.dataset.sparse_features=false", "model.conv=graph_conv/gcn", f"run_dir={tmp_path}/b"]
    plain = ExperimentBuilder.from_config(load_config([*base, *dense])).build()
    assert not plain.train_data[0].x.is_sparse
    a = [shipped.trainer.train_step()["loss"] for _ in range(5)]
    b = [plain.trainer.train_step()["loss"] for _ in range(5)]
    assert a == pytest.approx(b, rel=1e-5)


def fit(overrides: list[str]) -> dict:
    cfg = load_config(overrides)
    return ExperimentBuilder.from_config(cfg).build().trainer.fit()


def test_best_model_exports_the_weights_of_the_best_validation_epoch(tmp_path) -> None:
    from toolbox.eval.run import evaluate_model

    run = tmp_path / "run"
    overrides = [
        "experiment=gcn_cora", "data=karate_club", "trainer.max_steps=25", "optimizer.decay_only=null",
        "callbacks=none", "+callbacks.jsonl={name: jsonl}", "+callbacks.checkpoint={name: checkpoint}",
        "+callbacks.best_model={name: best_model, monitor: eval/val_accuracy}",
        f"run_dir={run}", "device=cpu", "num_threads=1",
    ]  # fmt: skip
    fit(overrides)
    evals = [
        r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "eval"
    ]
    assert [r["step"] for r in evals] == list(range(1, 26))  # every step (the last one: the final evaluation)
    best = max(evals, key=lambda r: (r["eval/val_accuracy"], -r["step"]))  # the first of the best
    last = evals[-1]
    assert last["eval/best_step"] == best["step"]
    assert last["eval/best_test_accuracy"] == best["eval/test_accuracy"]
    assert (run / "model" / "config.json").is_file() and (run / "model" / "model.safetensors").is_file()
    exported = evaluate_model(load_config(overrides), run / "model")
    assert exported["eval/test_accuracy"] == best["eval/test_accuracy"]
    assert exported["eval/val_accuracy"] == best["eval/val_accuracy"]


def test_gin_learns_to_classify_generated_block_model_graphs(tmp_path) -> None:
    metrics = fit(
        [
            "experiment=gin_sbm", "data.source.num_graphs=120", "trainer.max_steps=40",
            "trainer.eval_every=20", f"run_dir={tmp_path}", *QUIET,
        ]
    )  # fmt: skip
    assert metrics["eval/test_accuracy"] >= 0.8, metrics  # 24 test graphs; chance is 0.5


def write_tu_set(root: Path, name: str = "ER2", num_graphs: int = 120, seed: int = 0) -> None:
    """A TUDataset-format folder (``<name>_A.txt``, ``_graph_indicator.txt``, ``_graph_labels.txt``,
    ``_node_labels.txt``; 1-based node ids, both directions of each edge): Erdős–Rényi graphs of
    12-20 nodes, class 1 twice as dense as class 0 (p 0.3 vs 0.15), node labels 3 random types."""
    g = torch.Generator().manual_seed(seed)
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    edges, indicator, node_labels, labels, first = [], [], [], [], 1
    for i in range(num_graphs):
        y, n = i % 2, int(torch.randint(12, 21, (1,), generator=g))
        upper = torch.triu(torch.rand(n, n, generator=g) < (0.3 if y else 0.15), diagonal=1)
        for a, b in upper.nonzero().tolist():
            edges += [(first + a, first + b), (first + b, first + a)]
        indicator += [i + 1] * n
        node_labels += torch.randint(0, 3, (n,), generator=g).tolist()
        labels.append(y)
        first += n
    (raw / f"{name}_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (raw / f"{name}_graph_indicator.txt").write_text("".join(f"{i}\n" for i in indicator))
    (raw / f"{name}_graph_labels.txt").write_text("".join(f"{y}\n" for y in labels))
    (raw / f"{name}_node_labels.txt").write_text("".join(f"{y}\n" for y in node_labels))


def test_gin_classifies_the_graphs_of_a_tudataset_folder(tmp_path) -> None:
    write_tu_set(tmp_path / "tu")
    metrics = fit(
        [
            "experiment=gin_tu", "data.source.dataset=ER2", f"data.source.root={tmp_path / 'tu'}",
            "data.source.download=false", "trainer.max_steps=60", f"run_dir={tmp_path / 'run'}",
            "+callbacks.best_model={name: best_model, monitor: eval/val_accuracy}", *QUIET,
        ]
    )  # fmt: skip
    # 96 training, 12 validation, 12 test graphs; chance is 0.5 (measured: val 0.92, test 1.0)
    assert metrics["eval/val_accuracy"] >= 0.8 and metrics["eval/test_accuracy"] >= 0.8, metrics


def test_link_prediction_reports_roc_auc_on_held_out_edges(tmp_path) -> None:
    metrics = fit(
        [
            "experiment=gae_cora", "data=sbm", "+data.source.block_size=40", "+data.dataset.link_split={num_val: 0.1, num_test: 0.2}",
            "model.hidden_dims=[32,16]", "trainer.max_steps=40", "trainer.eval_every=10", f"run_dir={tmp_path}", *QUIET,
        ]
    )  # fmt: skip
    assert 0.0 <= metrics["eval/test_accuracy"] <= 1.0
    assert metrics["eval/test_roc_auc"] > 0.7, metrics  # chance is 0.5
