"""``launcher=srun`` without a cluster: the job's node count and the environment of the new step.

Inside Snakemake's SLURM jobstep (``srun -n1`` in a two-node job) the environment describes the
one-node step (SLURM_NNODES=1, SLURM_JOB_NODELIST=tbnode1); a nested ``srun --nodes=2`` run with it
fails ("Only allocated 1 nodes asked for 2") and the node count read from it is 1. The real run
across two nodes is tests/workflow/test_workflow_slurm.py (needs the local cluster).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolbox.launch import LaunchError
from toolbox.launch.srun import allocation_nodes, step_env

# what a task of `srun -n1 --nodes=2` sees inside a two-node job (copied from the local cluster)
STEP_ENV = {
    "SLURM_JOB_ID": "41", "SLURM_JOBID": "41", "SLURM_CLUSTER_NAME": "toolbox", "SLURM_CPUS_ON_NODE": "1",
    "SLURM_CPUS_PER_TASK": "1", "SLURM_JOB_NODELIST": "tbnode1", "SLURM_NNODES": "1",
    "SLURM_NODELIST": "tbnode[1-2]", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "tbnode1", "PATH": "/usr/bin", "SRUN_CPUS_PER_TASK": "1",
}  # fmt: skip


def test_the_new_step_keeps_only_the_jobs_identity() -> None:
    env = step_env(STEP_ENV)
    assert env == {
        "SLURM_JOB_ID": "41", "SLURM_JOBID": "41", "SLURM_CLUSTER_NAME": "toolbox", "PATH": "/usr/bin",
        "SRUN_CPUS_PER_TASK": "1",
    }  # fmt: skip


def _fake_scontrol(tmp_path: Path, monkeypatch, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "scontrol"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_the_node_count_is_the_jobs_not_the_steps(tmp_path, monkeypatch) -> None:
    _fake_scontrol(
        tmp_path, monkeypatch,
        '[ "$4" = 41 ] && echo "JobId=41 JobName=x NumNodes=2 NumCPUs=2 NumTasks=2 NodeList=tbnode[1-2]"',
    )  # fmt: skip
    for key, value in STEP_ENV.items():
        if key.startswith("SLURM_"):
            monkeypatch.setenv(key, value)
    assert allocation_nodes() == 2


def test_outside_a_job_there_is_no_allocation(monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert allocation_nodes() is None


def test_a_job_slurmctld_does_not_know_is_an_error_naming_it(tmp_path, monkeypatch) -> None:
    _fake_scontrol(
        tmp_path, monkeypatch, 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1'
    )
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    with pytest.raises(LaunchError, match=r"'scontrol show job 99' did not give .*Invalid job id"):
        allocation_nodes()
