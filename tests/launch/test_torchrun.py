"""``toolbox launch``: the torchrun launcher as typed, its failures, its command line, sweeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolbox.core.errors import ConfigError
from toolbox.launch.command import parse_sweep
from toolbox.launch.torchrun import TorchrunLauncher

TOOLBOX = [sys.executable, "-m", "toolbox.cli"]
# sft_arith shrunk to seconds: the user's command line plus these
SMALL = [
    "model.hidden_size=64", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=128",
    "data.source.num_train=256", "data.source.num_test=32", "trainer.batch_size=8", "trainer.max_steps=4",
    "trainer.eval_every=0", "trainer.save_every=0", "eval=lm", "callbacks=none", "device=cpu",
]  # fmt: skip


def _toolbox(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*TOOLBOX, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_launch_torchrun_ddp_as_typed(tmp_path):
    run_dir = tmp_path / "run"
    proc = _toolbox(
        "launch", "experiment=sft_arith", "launcher=torchrun", "strategy=ddp", "launcher.nproc=2", *SMALL,
        f"run_dir={run_dir}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert printed["run_dir"] == str(run_dir) and "eval/loss" in printed
    result = json.loads((run_dir / "launch" / "result.json").read_text())
    assert result["world_size"] == 2 and result["step"] == 4
    assert result["metrics"]["eval/loss"] == printed["eval/loss"]
    logs = list((run_dir / "launch" / "logs").rglob("stdout.log"))
    assert len(logs) == 2  # one per rank


def test_a_failing_worker_is_a_clear_error_and_train_config_goes_through_the_launcher(tmp_path):
    """What the workflow's train rule runs: `toolbox train --config` with the launcher in the config."""
    # 2 ranks x batch 200 cannot be drawn from 256 examples: every worker raises while building
    composed = tmp_path / "train.yaml"
    proc = _toolbox(
        "compose", "launcher=torchrun", "launcher.nproc=2", "strategy=ddp", *SMALL, "trainer.batch_size=200",
        "--out", str(composed),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = _toolbox("train", "--config", str(composed), "--out", str(tmp_path / "run"))
    assert proc.returncode != 0
    assert "torchrun: a worker failed (exit status" in proc.stderr
    assert "cannot fill one batch" in proc.stderr  # the failing rank's own error is shown
    assert (tmp_path / "run" / "launch" / "config.yaml").is_file()  # --out reached the workers


def test_torchrun_command_lines(tmp_path):
    paths = (tmp_path / "c.yaml", tmp_path / "r.json", tmp_path / "logs", "run")
    one = TorchrunLauncher(nproc=2).command(*paths)
    assert "--nproc-per-node=2" in one and "--master-addr=127.0.0.1" in one and "--rdzv-backend=static" in one
    assert one[-5:] == ["-m", "toolbox.launch.worker", str(paths[0]), "--result", str(paths[1])]
    two = TorchrunLauncher(nproc=4, nnodes=2, node_rank=1, rdzv_endpoint="node0:29400").command(*paths)
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node0:29400",
        "--rdzv-id=run",
    } <= set(two)
    with pytest.raises(ConfigError, match="rdzv_endpoint"):
        TorchrunLauncher(nnodes=2)
    with pytest.raises(ConfigError, match="node_rank"):
        TorchrunLauncher(nnodes=2, node_rank=2, rdzv_endpoint="h:1")


def test_parse_sweep_is_a_grid():
    assert parse_sweep(["optimizer.lr=1e-3,3e-3", "seed=0,1"]) == [
        ["optimizer.lr=1e-3", "seed=0"], ["optimizer.lr=1e-3", "seed=1"],
        ["optimizer.lr=3e-3", "seed=0"], ["optimizer.lr=3e-3", "seed=1"],
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="KEY=V1,V2"):
        parse_sweep(["optimizer.lr"])


def test_local_sweep_trains_each_combination(tmp_path, capsys):
    from toolbox.cli import main

    run_dir = tmp_path / "sweep_run"
    code = main(
        ["launch", *SMALL, "trainer.batch_size=16", f"run_dir={run_dir}", "--sweep", "trainer.max_steps=1,2"]
    )
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [item["overrides"] for item in lines] == [["trainer.max_steps=1"], ["trainer.max_steps=2"]]
    listing = json.loads((run_dir / "sweep" / "sweep.json").read_text())
    assert [Path(i["run_dir"]).name for i in listing] == ["000", "001"]
    assert all((Path(i["run_dir"]) / "config.yaml").is_file() for i in listing)
