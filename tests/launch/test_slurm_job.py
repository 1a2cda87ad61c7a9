"""The SLURM job function without a cluster: submitit's debug executor runs it in this process."""

from __future__ import annotations

import json

import pytest

from toolbox.core.errors import ConfigError

SMALL = [
    "model.hidden_size=64", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=128",
    "data.source.num_train=256", "data.source.num_test=32", "trainer.batch_size=16", "trainer.max_steps=3",
    "trainer.eval_every=0", "eval=lm", "callbacks=none", "device=cpu",
]  # fmt: skip


def test_slurm_launcher_runs_the_job_through_submitit_debug(tmp_path, capsys, monkeypatch):
    pytest.importorskip("submitit")
    from toolbox.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["launch", *SMALL, "launcher=slurm", "launcher.cluster=debug", "run_dir=run", "--wait"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["run_dir"] == "run" and "eval/loss" in printed
    assert (tmp_path / "run" / "checkpoints" / "step_00000003").is_dir()
    assert (tmp_path / "run" / "launch" / "config.yaml").is_file()


def test_checkpointing_requeues_with_resume(tmp_path):
    from toolbox.launch.slurm import SlurmTrainJob

    job = SlurmTrainJob(str(tmp_path / "config.yaml"), str(tmp_path), mode="torchrun", nproc=2)
    again = job.__submitit_checkpoint__()
    assert again.function.resume is True  # the requeued job runs with resume_from=auto
    assert (again.function.workdir, again.function.nproc) == (str(tmp_path), 2)


def test_slurm_launcher_config_errors():
    from toolbox.launch.slurm import SlurmLauncher

    with pytest.raises(ConfigError, match="launcher.mode"):
        SlurmLauncher(mode="mpi")
    with pytest.raises(ConfigError, match="launcher.cluster"):
        SlurmLauncher(cluster="k8s")


def test_no_slurm_client_is_one_error_line(tmp_path, capsys, monkeypatch):
    """Issue 38: a SLURM launch with no cluster printed submitit's 31-line traceback."""
    pytest.importorskip("submitit")
    import sys
    from pathlib import Path

    from toolbox.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no srun, no sbatch
    code = main(["launch", *SMALL, "scheduler.warmup_steps=0", "launcher=slurm", "run_dir=run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err == [
        "error: launcher=slurm: no SLURM client here (srun and sbatch not found). Is a SLURM cluster "
        "reachable from here (`sinfo`)? Without one: launcher=local, or launcher.cluster=local to run "
        "the same job through submitit on this machine."
    ]


def test_a_refused_submission_is_one_error_line(tmp_path, capsys, monkeypatch):
    """sbatch present but no cluster it can reach (here: a configuration file that does not exist)."""
    pytest.importorskip("submitit")
    import shutil

    if shutil.which("sbatch") is None or shutil.which("srun") is None:
        pytest.skip("no SLURM client installed")
    from toolbox.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-such-slurm.conf"))
    code = main(["launch", *SMALL, "scheduler.warmup_steps=0", "launcher=slurm", "run_dir=run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1, err
    assert err[0].startswith("error: launcher=slurm: sbatch refused the job (sbatch: ")
    assert "Without one: launcher=local" in err[0]
