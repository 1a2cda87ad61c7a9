"""The graph runs in the workflow: tables of mean ± std over seeds, skipped stages, and the train
slice of a run that selects its model on validation."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from workflow_copy import REPO, copy_workflow, tool

sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "workflow" / "scripts"))
import dvc_yaml  # noqa: E402
import result_tables  # noqa: E402
import run_config  # noqa: E402
import slice_config  # noqa: E402

GRAPH = ["data=karate_club", "trainer.max_steps=3", "trainer.save_every=0", "device=cpu", "num_threads=1"]


def graph_config(seeds: int = 2) -> dict:
    runs = {
        f"gcn_s{s}": {
            "experiment": "gcn_cora",
            "overrides": [f"seed={s}", *GRAPH],
            "skip": ["serve_bench"],
            "resources": {"cpus": 1, "mem_mb": 2000, "runtime": 10},
        }
        for s in range(seeds)
    }
    table = {
        "metric": "eval/test_accuracy",
        "scale": 100,
        "rows": {"GCN": {"runs": "gcn_s*", "reference": "81.5"}},
    }
    return {"runs": runs, "tables": {"karate": table}}


def test_the_repo_config_tabulates_ten_seeds_of_gcn_and_gat_on_cora() -> None:
    cfg = run_config.load_config(REPO / "config" / "config.yaml")
    assert run_config.config_errors(cfg) == []
    rows = cfg["tables"]["cora"]["rows"]
    assert [result_tables.table_runs(rows[m], cfg["runs"]) for m in ("GCN", "GAT")] == [
        [f"{m}_cora_s{s}" for s in range(10)] for m in ("gcn", "gat")
    ]
    assert all(cfg["runs"][f"gat_cora_s{s}"]["overrides"][0] == f"seed={s}" for s in range(10))
    dvc = dvc_yaml.dvc_stages(cfg["runs"], cfg["tables"])["stages"]
    assert dvc["table-cora"]["deps"] == [
        f"work/{m}_cora_s{s}/eval.json" for m in ("gcn", "gat") for s in range(10)
    ]
    assert dvc["table-cora"]["outs"] == ["results/tables/cora.md", "results/tables/cora.json"]
    assert "serve_bench-gcn_cora_s0" not in dvc and "serve_bench-demo" in dvc


def test_skip_takes_only_optional_stages_and_rows_must_name_runs() -> None:
    cfg = graph_config()
    cfg["runs"]["gcn_s0"]["skip"] = ["train"]
    cfg["tables"]["karate"]["rows"]["GAT"] = {"runs": "gat_s*"}
    assert run_config.config_errors(cfg) == [
        "runs.gcn_s0.skip: 'train' is not a stage a run may skip (these may: serve_bench)",
        "tables.karate.rows.GAT.runs: 'gat_s*' names no run of this file (the runs: gcn_s0, gcn_s1)",
    ]


def test_a_run_that_selects_on_validation_keeps_its_evaluators_in_the_train_slice() -> None:
    full = {
        "seed": 0,
        "eval": {"graph": {"name": "graph_metrics"}},
        "callbacks": {"best_model": {"name": "best_model"}},
    }
    defaults = {"seed": 0, "eval": {"perplexity": {"name": "perplexity"}}, "callbacks": {}}
    assert slice_config.slice_config(full, defaults, "train")["eval"] == {"graph": {"name": "graph_metrics"}}
    plain = {**full, "callbacks": {}}
    assert slice_config.slice_config(plain, defaults, "train")["eval"] == defaults["eval"]


def test_toolbox_table_writes_mean_and_std_beside_the_reference(tmp_path) -> None:
    files = []
    for i, acc in enumerate([0.80, 0.82, 0.84]):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps({"eval/test_accuracy": acc}))
    out = subprocess.run(
        [tool("toolbox"), "table", "--metric", "eval/test_accuracy", "--scale", "100", "--row", "GCN",
         "81.5 (paper)", *map(str, files), "--title", "Cora", "--out", str(tmp_path / "t.md"),
         "--json", str(tmp_path / "t.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "| GCN | 3 | 82.00 ± 2.00 | 80.00 | 84.00 | 81.5 (paper) |" in (tmp_path / "t.md").read_text()
    assert out.stdout == (tmp_path / "t.md").read_text()
    row = json.loads((tmp_path / "t.json").read_text())["rows"][0]
    assert row["values"] == pytest.approx([80.0, 82.0, 84.0]) and row["std"] == pytest.approx(2.0)
    bad = subprocess.run(
        [tool("toolbox"), "table", "--metric", "eval/roc", "--row", "GCN", "-", str(files[0]), "--out", str(tmp_path / "x.md")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "has no 'eval/roc'; it has: eval/test_accuracy" in bad.stderr


@pytest.mark.slow
def test_dvc_repro_of_the_gcn_runs_writes_the_table_and_a_second_does_nothing(tmp_path) -> None:
    cfg = graph_config()
    wf = copy_workflow(tmp_path / "repo", cfg)
    wf.git_dvc_init()
    wf.dvc("repro", "table-karate", timeout=3000)  # 9 stages; minutes on a loaded 2-core machine
    table = (wf.root / "results" / "tables" / "karate.md").read_text()
    assert re.search(r"\| GCN \| 2 \| \d+\.\d\d ± \d+\.\d\d \|", table), table
    values = json.loads((wf.root / "results" / "tables" / "karate.json").read_text())["rows"][0]["values"]
    evals = [json.loads((wf.root / f"work/gcn_s{s}/eval.json").read_text()) for s in range(2)]
    assert values == pytest.approx([100 * e["eval/test_accuracy"] for e in evals])
    again = wf.dvc("repro", "table-karate", timeout=600).stdout
    assert "Running stage" not in again, again
    assert yaml.safe_load((wf.root / "dvc.lock").read_text())["stages"]["table-karate"]
