"""Every launcher that starts other processes (torchrun, srun, a SLURM job) checks the run folder
itself before it starts or queues anything: called directly (not through ``toolbox train``, whose
run-folder claim checks it too), a run folder it cannot write is one ``OutputError`` naming the
folder, and nothing is started, queued or written."""

from __future__ import annotations

import subprocess

import pytest
from omegaconf import OmegaConf

from toolbox.core.errors import OutputError
from toolbox.launch.slurm import SlurmLauncher
from toolbox.launch.srun import SrunLauncher
from toolbox.launch.torchrun import TorchrunLauncher


@pytest.fixture
def cfg_under_a_file(tmp_path, monkeypatch):
    """A config whose run_dir lies under a file; starting any process fails the test."""
    (tmp_path / "a_file").write_text("not a folder\n")

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    return OmegaConf.create({"run_name": "r", "run_dir": str(tmp_path / "a_file" / "run")}), tmp_path


def _assert_refused(call, tmp_path):
    with pytest.raises(OutputError) as e:
        call()
    assert str(e.value) == (
        f"run_dir (--out): {tmp_path / 'a_file'} is a file, so {tmp_path / 'a_file' / 'run'} cannot be "
        "a folder; choose another path."
    )
    assert (tmp_path / "a_file").read_text() == "not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_torchrun_checks_the_run_folder_before_starting_workers(cfg_under_a_file):
    cfg, tmp_path = cfg_under_a_file
    _assert_refused(lambda: TorchrunLauncher(nproc=2).launch(cfg), tmp_path)


def test_srun_checks_the_run_folder_before_starting_nodes(cfg_under_a_file):
    cfg, tmp_path = cfg_under_a_file
    _assert_refused(lambda: SrunLauncher(nproc=2).launch(cfg), tmp_path)


def test_slurm_checks_every_run_folder_before_queueing(cfg_under_a_file):
    pytest.importorskip("submitit")
    cfg, tmp_path = cfg_under_a_file
    launcher = SlurmLauncher(cluster="debug")
    _assert_refused(lambda: launcher.submit(cfg), tmp_path)
    good = OmegaConf.create({"run_name": "g", "run_dir": str(tmp_path / "good")})
    _assert_refused(lambda: launcher.submit_sweep([good, cfg]), tmp_path)  # nothing of `good` either
