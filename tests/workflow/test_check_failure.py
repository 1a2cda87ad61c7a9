"""A failing check stage: the table of expected vs got on the terminal (not only in its log), and
the run's published results/<run>/check.json no longer saying it passed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml
from workflow_copy import TINY_RUN, Workflow, copy_workflow, tiny_config

PASSED = {"run": TINY_RUN, "passed": True, "rows": []}


def _fake_upstream(root: Path) -> None:
    """Every input of the check stage present and up to date, as after an earlier run: the compose
    outputs, data, model, metrics and an eval.json that falls short of expect:."""
    work = root / "work" / TINY_RUN
    files = [
        root / "work/_defaults/config.yaml",
        *(work / "config" / f"{s}.yaml" for s in ("full", "data", "train", "eval")),
        work / "data" / "records.json",
        work / "train/model" / "config.json",
        work / "train/metrics.jsonl",
        work / "eval.json",
    ]
    start = time.time() + 5
    for i, path in enumerate(files):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
        os.utime(path, (start + i, start + i))
        os.utime(path.parent, (start + i, start + i))
    (work / "eval.json").write_text(json.dumps({"eval/exact_match": 0.5}))
    os.utime(work / "eval.json", (start + len(files), start + len(files)))


def test_failed_check_prints_the_table_and_unpublishes_the_pass(tmp_path: Path) -> None:
    cfg = tiny_config(expect={"eval/exact_match": {"min": 0.95}})
    wf: Workflow = copy_workflow(tmp_path / "repo", cfg)
    _fake_upstream(wf.root)
    published = wf.root / "results" / TINY_RUN
    published.mkdir(parents=True)
    (published / "check.json").write_text(json.dumps(PASSED))

    res = wf.snakemake("-c1", f"work/{TINY_RUN}/check.json", check=False)
    assert res.returncode != 0
    assert wf.ran(res.stdout + res.stderr) == {"check"}, res.stderr[-3000:]
    screen = res.stdout + res.stderr
    assert "| tiny | eval/exact_match | >= 0.95 | 0.5 | **NO** |" in screen, screen[-3000:]
    after = json.loads((published / "check.json").read_text())
    assert after["passed"] is False and after["rows"][0]["metric"] == "eval/exact_match"
    # the config stays the one we wrote (no defaults filled in by the validation)
    assert yaml.safe_load((wf.root / "config/config.yaml").read_text()) == cfg
