"""``toolbox plan --estimate``: a measured calibration of the train stage, cached by its inputs."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import sys
from pathlib import Path

from workflow_copy import REPO, TINY_RUN, copy_workflow, tiny_config, tool

from toolbox.results.estimate import Calibration, Estimate

sys.path.insert(0, str(REPO / "workflow"))
import estimated  # noqa: E402
import runs  # noqa: E402


def test_the_model_of_the_four_calibration_runs():
    # A = 3 steps, B = 13 steps, C = 3 steps with 2 evals, D = 3 steps with 2 checkpoints
    cal = Calibration(a_s=10.0, b_s=20.0, c_s=11.0, d_s=16.0, peak_mb=500.0, took_s=57.0)
    assert (cal.step_s, cal.eval_event_s, cal.save_event_s, cal.fixed_s) == (1.0, 0.5, 3.0, 7.0)
    # 100 steps, eval every 10 and checkpoint every 50: 9 evals and 1 checkpoint in the loop (the
    # last step's are the final ones)
    assert cal.wall_s(100, 10, 50) == 7.0 + 100 + 9 * 0.5 + 1 * 3.0
    assert cal.wall_s(100, 0, 0) == 107.0
    # an eval every step (gcn_cora) costs evals, not checkpoints
    assert cal.wall_s(200, 1, 50) == 7.0 + 200 + 199 * 0.5 + 3 * 3.0
    est = Estimate("r", "train", wall_s=125.0, peak_mb=500.0, steps=100, calibration=cal)
    # 125 s x 1.5 + 60 s for the job's start -> 5 min; 500 MB x 1.3 -> 700 MB
    assert est.slurm() == {"runtime": 5, "mem_mb": 700}


def _estimate_of(run_dir: Path, request: dict, train_yaml: str = "trainer: {max_steps: 20}\n") -> None:
    (run_dir / "config").mkdir(parents=True)
    (run_dir / "config" / "train.yaml").write_text(train_yaml)
    (run_dir / "estimate").mkdir()
    digest = hashlib.sha256(train_yaml.encode()).hexdigest()
    record = {"slurm": request, "slices": {"train.yaml": digest}}
    (run_dir / "estimate" / "train.json").write_text(json.dumps(record))


def test_the_train_job_asks_for_its_estimate_where_the_run_sets_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "work" / "r"
    _estimate_of(run_dir, {"runtime": 3, "mem_mb": 700})
    got = estimated.train_resources({"resources": {"cpus": 1}}, run_dir, runs.RESOURCE_DEFAULTS)
    assert got == {**runs.RESOURCE_DEFAULTS, "cpus": 1, "runtime": 3, "mem_mb": 700}
    # the run's own values win, one by one
    own = estimated.train_resources({"resources": {"runtime": 30}}, run_dir, runs.RESOURCE_DEFAULTS)
    assert (own["runtime"], own["mem_mb"]) == (30, 700)


def test_an_estimate_of_other_slices_or_none_gives_the_defaults(tmp_path: Path) -> None:
    run_dir = tmp_path / "work" / "r"
    assert estimated.estimated_request(run_dir) == {}  # no estimate yet
    _estimate_of(run_dir, {"runtime": 3, "mem_mb": 700})
    (run_dir / "config" / "train.yaml").write_text("trainer: {max_steps: 2000}\n")  # the run changed
    assert estimated.estimated_request(run_dir) == {}
    got = estimated.train_resources({}, run_dir, runs.RESOURCE_DEFAULTS)
    assert (got["runtime"], got["mem_mb"]) == (60, 4000)
    (run_dir / "estimate" / "train.json").write_text("{not json")
    assert estimated.estimated_request(run_dir) == {}


def test_plan_estimate_calibrates_caches_and_the_run_fits_its_request(tmp_path: Path) -> None:
    # the run sets cpus only: the train job asks for the estimate's runtime and mem_mb
    workflow_copy = copy_workflow(tmp_path / "repo", tiny_config(resources={"cpus": 1}))
    before = workflow_copy.snakemake("-n", f"work/{TINY_RUN}/train/model")
    assert re.search(r"\bruntime=60\b", before.stdout + before.stderr), before.stdout[-3000:]
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
    assert set(record["slices"]) == {"train.yaml", "data.yaml"}
    # the eval stage, measured once on the calibration's model
    assert record["calibration"]["eval_s"] > 0 and record["calibration"]["eval_peak_mb"] > 100
    assert any(line.startswith(f"| {TINY_RUN} | eval | ") for line in res.stdout.splitlines()), res.stdout

    # the train rule's resources are now the estimate's request (what --profile slurm submits)
    dry = workflow_copy.snakemake("-n", f"work/{TINY_RUN}/train/model")
    req = record["slurm"]
    assert re.search(rf"\bmem_mb={req['mem_mb']}\b", dry.stdout), dry.stdout[-3000:]
    assert re.search(rf"\bruntime={req['runtime']}\b", dry.stdout), dry.stdout[-3000:]

    # the real train stage finishes inside the time it would ask SLURM for
    workflow_copy.snakemake("-c1", f"work/{TINY_RUN}/train/model", timeout=900)
    bench = workflow_copy.root / "work" / TINY_RUN / "benchmarks" / "train.tsv"
    actual = float(next(csv.DictReader(bench.open(), delimiter="\t"))["s"])
    assert actual < record["slurm"]["runtime"] * 60, (actual, record)
    assert Path(workflow_copy.root / "work" / TINY_RUN / "train" / "model").is_dir()


TINY_EXPERIMENT = [
    "experiment=sft_arith", "model.hidden_size=64", "model.num_layers=1", "model.num_heads=2",
    "model.intermediate_size=128", "data.source.num_train=64", "data.source.num_test=8",
    "trainer.max_steps=20", "scheduler.warmup_steps=2", "device=cpu", "callbacks=none",
]  # fmt: skip


def test_plan_estimate_of_an_experiment_that_is_no_run(tmp_path: Path, monkeypatch, capsys) -> None:
    """``experiment=NAME KEY=VALUE ...`` (no config/config.yaml needed): laid out as a run under
    work/NAME, calibrated, cached; launcher=slurm on that config finds the same request."""
    from toolbox.cli import main
    from toolbox.experiment import compose_run
    from toolbox.results.estimated_request import request_for_config

    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--estimate", *TINY_EXPERIMENT]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| sft_arith | train |")]
    assert len(rows) == 1 and "--time=" in rows[0] and "measured" in rows[0], rows
    run = tmp_path / "work" / "sft_arith"
    record = json.loads((run / "estimate" / "train.json").read_text())
    assert record["steps"] == 20 and record["peak_mb"] > 100 and (run / "data" / "train.jsonl").is_file()
    assert main(["plan", "--estimate", *TINY_EXPERIMENT]) == 0
    assert "| cached |" in capsys.readouterr().out
    cfg = compose_run(["launcher.name=slurm"], run / "config" / "train.yaml", data_dir="work/sft_arith/data")
    assert request_for_config(cfg) == record["slurm"]


def test_plan_names_what_is_wrong_with_key_value_targets(tmp_path: Path, monkeypatch, capsys) -> None:
    from toolbox.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("runs:\n  demo: {experiment: demo}\n")
    cases = {
        ("plan", "--estimate", "trainer.max_steps=5"): "no experiment=NAME names the experiment",
        ("plan", "experiment=dpo_arith"): "which only --estimate measures",
        ("plan", "--estimate", "experiment=demo"): "has a run named demo; estimate that run with",
    }
    for argv, message in cases.items():
        assert main(list(argv)) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)


def test_the_step_cost_is_the_trainers_own_timing_of_the_later_steps(tmp_path: Path) -> None:
    from toolbox.results.estimate import logged_step_s

    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": i, "split": "train", "step_time": 0.5 if i <= 3 else 0.02} for i in range(1, 14)]
    rows.append({"step": 13, "split": "eval", "loss": 1.0})
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert abs(logged_step_s(metrics) - 0.02) < 1e-12  # steps 4..13: the first K1 left out
    assert logged_step_s(tmp_path / "none.jsonl") is None
    # 2 s of start-up jitter between A and B would make (B - A) / 10 = 0.2 s a step; the log says 0.02
    cal = Calibration(a_s=10.0, b_s=12.0, c_s=11.0, d_s=11.0, peak_mb=1.0, took_s=1.0, b_step_s=0.02)
    assert cal.step_s == 0.02 and abs(cal.wall_s(2500, 0, 0) - (10.0 - 3 * 0.02 + 2500 * 0.02)) < 1e-9
