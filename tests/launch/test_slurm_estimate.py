"""``launcher=slurm`` asks for the time and memory ``toolbox plan --estimate`` measured for its config.

The submission goes through submitit to a recording ``sbatch`` (a script on PATH that keeps the
batch script it is given and answers with a job id), so the ``#SBATCH`` lines are the ones a real
cluster would get; tests/launch/test_slurm.py checks the same against the local cluster.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from toolbox.cli import main
from toolbox.experiment import compose_run
from toolbox.results.estimate import Calibration, Estimate, _write_cache, composed_digest

pytest.importorskip("submitit")

SMALL = [
    "experiment=sft_arith", "model.hidden_size=64", "model.num_layers=1", "model.num_heads=2",
    "model.intermediate_size=128", "data.source.num_train=64", "data.source.num_test=8",
    "trainer.max_steps=20", "device=cpu", "callbacks=none",
]  # fmt: skip
# 125 s predicted x 1.5 + 60 s for the job's start -> 5 min; 500 MB x 1.3 -> 700 MB
ESTIMATE = Estimate(
    "r", "train", wall_s=125.0, peak_mb=500.0, steps=20,
    calibration=Calibration(a_s=10.0, b_s=20.0, c_s=11.0, d_s=16.0, peak_mb=500.0, took_s=57.0),
)  # fmt: skip


@pytest.fixture
def workflow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workflow folder with ``work/r/config/train.yaml``, ``work/r/data`` and the run's estimate,
    and a recording sbatch (and srun, which submitit looks for) first on PATH."""
    run = tmp_path / "work" / "r"
    (run / "config").mkdir(parents=True)
    (run / "data").mkdir()
    OmegaConf.save(compose_run(SMALL), run / "config" / "train.yaml")
    config, data = Path("work/r/config/train.yaml"), Path("work/r/data")
    monkeypatch.chdir(tmp_path)
    _write_cache(run / "estimate" / "train.json", "key", ESTIMATE, composed_digest(config, data))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\ncp "$1" {tmp_path}/submitted.sh\necho "Submitted batch job 4242"\n')
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    for tool in (sbatch, bin_dir / "srun"):
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    return tmp_path


def _submit(root: Path, *overrides: str, capsys, out: str = "work/r/train") -> list[str]:
    """``toolbox launch`` of the run's train stage with launcher=slurm: the submitted #SBATCH lines."""
    args = ["launch", "--config", "work/r/config/train.yaml", "--data", "work/r/data", "--out", out]
    code = main([*args, "launcher.name=slurm", *overrides])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out.splitlines()[-1])["job_id"] == "4242"
    return [line for line in (root / "submitted.sh").read_text().splitlines() if line.startswith("#SBATCH")]


def test_the_job_asks_for_the_estimate_of_its_config(workflow_run: Path, capsys) -> None:
    lines = _submit(workflow_run, capsys=capsys)
    assert "#SBATCH --time=5" in lines and "#SBATCH --mem=700MB" in lines, lines


def test_set_values_win_one_by_one(workflow_run: Path, capsys) -> None:
    lines = _submit(workflow_run, "launcher.time_min=7", capsys=capsys)
    assert "#SBATCH --time=7" in lines and "#SBATCH --mem=700MB" in lines, lines
    lines = _submit(workflow_run, "launcher.mem_gb=2", capsys=capsys, out="work/r/train-2")
    assert "#SBATCH --time=5" in lines and "#SBATCH --mem=2GB" in lines, lines


def test_another_config_gets_the_defaults(workflow_run: Path, capsys) -> None:
    # 2000 steps is not what was measured: the default hour, and no --mem (the cluster's default)
    lines = _submit(workflow_run, "trainer.max_steps=2000", capsys=capsys)
    assert "#SBATCH --time=60" in lines, lines
    assert not [line for line in lines if line.startswith("#SBATCH --mem")], lines


def test_a_config_without_an_estimate_gets_the_defaults(workflow_run: Path, capsys) -> None:
    (workflow_run / "work" / "r" / "estimate" / "train.json").unlink()
    lines = _submit(workflow_run, capsys=capsys)
    assert "#SBATCH --time=60" in lines, lines
