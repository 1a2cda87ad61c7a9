"""``toolbox plan --estimate``: a measured calibration of the train stage, cached by its inputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from workflow_copy import TINY_RUN, Workflow, tool

from toolbox.results.estimate import Calibration, Estimate


def test_the_model_of_the_three_calibration_runs():
    # A = 3 steps, B = 13 steps, C = 3 steps with 2 evals + 2 checkpoints
    cal = Calibration(a_s=10.0, b_s=20.0, c_s=14.0, peak_mb=500.0, took_s=44.0)
    assert (cal.step_s, cal.event_s, cal.fixed_s) == (1.0, 2.0, 7.0)
    # 100 steps, eval and checkpoint every 10: 9 of each in the loop (the last step's are the final ones)
    assert cal.wall_s(100, 10, 10) == 7.0 + 100 + 18 * 1.0
    assert cal.wall_s(100, 0, 0) == 107.0
    est = Estimate("r", "train", wall_s=125.0, peak_mb=500.0, steps=100, calibration=cal)
    assert est.slurm() == {"runtime": 4, "mem_mb": 700}  # 125 s x 1.5 -> 4 min; 500 MB x 1.3 -> 700 MB


def test_plan_estimate_calibrates_caches_and_the_run_fits_its_request(workflow_copy: Workflow) -> None:
    res = workflow_copy.run(tool("toolbox"), "plan", "--estimate", f"results/{TINY_RUN}/", timeout=900)
    rows = [line for line in res.stdout.splitlines() if line.startswith(f"| {TINY_RUN} | train |")]
    assert len(rows) == 2, res.stdout  # the plan's row and the estimate's row
    assert "--time=" in rows[1] and "--mem=" in rows[1] and "measured" in rows[1], rows[1]
    cache = workflow_copy.root / "work" / TINY_RUN / "estimate" / "train.json"
    record = json.loads(cache.read_text())
    assert record["steps"] == 20 and record["wall_s"] > 0 and record["peak_mb"] > 100
    assert record["calibration"]["b_s"] > record["calibration"]["a_s"] * 0.5

    again = workflow_copy.run(tool("toolbox"), "plan", "--estimate", f"results/{TINY_RUN}/", timeout=300)
    assert f"| {TINY_RUN} | train |" in again.stdout and "| cached |" in again.stdout, again.stdout
    assert json.loads(cache.read_text())["key"] == record["key"]

    # the real train stage finishes inside the time it would ask SLURM for
    workflow_copy.snakemake("-c1", f"work/{TINY_RUN}/train/model", timeout=900)
    bench = workflow_copy.root / "work" / TINY_RUN / "benchmarks" / "train.tsv"
    actual = float(next(csv.DictReader(bench.open(), delimiter="\t"))["s"])
    assert actual < record["slurm"]["runtime"] * 60, (actual, record)
    assert Path(workflow_copy.root / "work" / TINY_RUN / "train" / "model").is_dir()
