"""``launcher=slurm`` against the real single-node cluster of workflow/scripts/local_slurm.sh.

Start it with ``bash workflow/scripts/local_slurm.sh ensure``; where it is not running every test
here is skipped with the reason. A requeued job (preempted through submitit, or requeued by
``scontrol requeue``) must resume from its checkpoint and end on the same weights, bit for bit, as
an uninterrupted run of the same config.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "workflow" / "scripts" / "local_slurm.sh"
TOOLBOX = [sys.executable, "-m", "toolbox.cli"]
SMALL = [
    "model.hidden_size=64", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=128",
    "data.source.num_train=256", "data.source.num_test=32", "trainer.batch_size=16", "eval=lm",
    "callbacks=none", "device=cpu", "launcher=slurm", "launcher.time_min=10", "launcher.poll_s=0.5",
]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def local_slurm() -> None:
    pytest.importorskip("submitit")
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT} not found")
    try:
        res = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.skip("local SLURM cluster: 'local_slurm.sh status' timed out")
    if res.returncode != 0:
        lines = (res.stdout + res.stderr).strip().splitlines()
        reason = lines[0] if lines else f"local_slurm.sh status exited {res.returncode}"
        pytest.skip(f"{reason}; start it with: bash {SCRIPT.relative_to(REPO)} ensure")
    for tool in ("sbatch", "sacct", "scontrol", "squeue"):
        if shutil.which(tool) is None:
            pytest.skip(f"local SLURM cluster: {tool} not on PATH")


def _toolbox(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOLBOX, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _sacct_states(job_id: str) -> list[str]:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], capture_output=True, text=True
    )
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def test_launch_slurm_trains_and_returns(tmp_path):
    run_dir = tmp_path / "run"
    proc = _toolbox("launch", *SMALL, "trainer.max_steps=5", f"run_dir={run_dir}", "--wait")
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert printed["run_dir"] == str(run_dir) and printed["eval/loss"] > 0
    assert "submitted SLURM job" in proc.stderr
    assert "Job completed successfully" in proc.stdout + proc.stderr  # the job's log, streamed
    assert (run_dir / "checkpoints" / "step_00000005" / "manifest.json").is_file()


def test_failed_job_wait_exits_non_zero(tmp_path):
    proc = _toolbox("launch", *SMALL, "trainer.batch_size=300", f"run_dir={tmp_path / 'run'}", "--wait")
    assert proc.returncode != 0
    assert "SLURM job" in proc.stderr and "cannot fill one batch" in proc.stderr
    assert "log:" in proc.stderr


def test_sweep_is_one_job_array_and_launch_returns_at_once(tmp_path):
    run_dir = tmp_path / "sweep_run"
    proc = _toolbox("launch", *SMALL, f"run_dir={run_dir}", "--sweep", "trainer.max_steps=1,2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert len(jobs) == 2 and all("_" in j["job_id"] for j in jobs)  # array tasks: <array id>_<index>
    deadline = time.time() + 300
    while time.time() < deadline:
        states = [s for j in jobs for s in _sacct_states(j["job_id"])]
        if len(states) == 2 and all(s == "COMPLETED" for s in states):
            break
        assert not any(s.startswith(("FAILED", "CANCELLED", "TIMEOUT")) for s in states), states
        time.sleep(1)
    else:
        pytest.fail(f"sweep jobs did not complete: {states}")
    for job, steps in zip(jobs, (1, 2), strict=True):
        assert (Path(job["run_dir"]) / "checkpoints" / f"step_{steps:08d}").is_dir()


def _final_weights(run_dir: Path) -> dict:
    from toolbox.core.checkpointer import Checkpointer

    _, state = Checkpointer(run_dir).load_latest()
    return state["model"]


REQUEUE_STEPS = {
    # submitit's preemption stops the job at once (USR2 -> checkpoint -> requeue -> exit)
    "preempted": ["trainer.max_steps=1000"],  # long enough that the job is still training when preempted
    # scontrol requeue sends SIGTERM (which submitit ignores) and SIGKILL ~5-10 s later: the steps
    # must be slow enough that the job is still training then
    "scontrol_requeue": ["trainer.max_steps=900", "trainer.batch_size=64", "model.num_layers=2"],
}


@pytest.mark.parametrize(
    "how",
    ["preempted", pytest.param("scontrol_requeue", marks=pytest.mark.slow)],  # slow: ~2 min
)
def test_requeued_job_resumes_to_the_same_weights(how, tmp_path):
    from toolbox.core.registries import LAUNCHERS
    from toolbox.experiment import load_config, run_experiment

    steps = [*REQUEUE_STEPS[how], "trainer.save_every=5", "trainer.eval_every=0", "model.dropout=0.1",
             "+callbacks.checkpoint={name:checkpoint,keep_last:2}"]  # fmt: skip
    max_steps = int(REQUEUE_STEPS[how][0].split("=")[1])
    cfg = load_config([*SMALL, *steps, f"run_dir={tmp_path / 'job'}"])
    launcher = LAUNCHERS.build(cfg.launcher)
    job = launcher.submit(cfg)
    checkpoints = tmp_path / "job" / "checkpoints"
    deadline = time.time() + 300
    # any checkpoint: with keep_last=2 the first ones are pruned within milliseconds on a fast machine
    while not any(checkpoints.glob("step_*/manifest.json")):
        assert time.time() < deadline and not job.done(), "the job never wrote a checkpoint"
        time.sleep(0.05)
    if how == "preempted":
        job._interrupt()  # submitit's preemption: SIGTERM, then USR2 -> __submitit_checkpoint__ + requeue
    else:
        subprocess.run(["scontrol", "requeue", str(job.job_id)], check=True)  # the cluster requeues it
    # a requeued job waits ~2 minutes before it is eligible again (slurmctld); let it start now
    seen = []
    while True:
        state = subprocess.run(
            ["squeue", "-h", "-j", str(job.job_id), "-o", "%T %r"], capture_output=True, text=True
        ).stdout.strip()
        if not seen or seen[-1] != state:
            seen.append(state)
        if state.startswith("PENDING"):
            subprocess.run(["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"], check=True)
            break
        if not state:  # gone from the queue: it ended instead of being requeued
            pytest.fail(f"job {job.job_id} ended instead of being requeued: squeue {seen}, "
                        f"sacct {_sacct_states(str(job.job_id))}")  # fmt: skip
        assert time.time() < deadline, f"job {job.job_id} was not requeued; squeue states: {seen}"
        time.sleep(0.2)

    reference_dir = tmp_path / "reference"
    run_experiment(load_config([*SMALL, *steps, f"run_dir={reference_dir}"]))  # in this process

    result = launcher.wait(job, stream=False)
    assert result["step"] == max_steps
    assert result["resumed_from"] is not None and 5 <= result["resumed_from"] < max_steps
    resumed, reference = _final_weights(tmp_path / "job"), _final_weights(reference_dir)
    assert resumed.keys() == reference.keys()
    for k in reference:
        assert torch.equal(resumed[k], reference[k]), k
    log = Path(job.paths.stdout).read_text() + Path(job.paths.stderr).read_text()
    if how == "preempted":
        assert "Requeued job" in log


def test_a_job_without_time_or_memory_asks_the_cluster_for_its_estimate(tmp_path):
    # the run's estimate (toolbox plan --estimate) of this very config: --time=5 --mem=700M
    from omegaconf import OmegaConf

    from toolbox.experiment import compose_run
    from toolbox.results.estimate import Calibration, Estimate, _write_cache, composed_digest

    run = tmp_path / "work" / "r"
    (run / "config").mkdir(parents=True)
    (run / "data").mkdir()
    composed = [o for o in SMALL if not o.startswith("launcher")]
    OmegaConf.save(compose_run(["experiment=sft_arith", *composed]), run / "config" / "train.yaml")
    cal = Calibration(a_s=10.0, b_s=20.0, c_s=11.0, d_s=16.0, peak_mb=500.0, took_s=57.0)
    estimate = Estimate("r", "train", wall_s=125.0, peak_mb=500.0, steps=20, calibration=cal)
    _write_cache(
        run / "estimate" / "train.json",
        "key",
        estimate,
        composed_digest(run / "config" / "train.yaml", run / "data"),
    )
    proc = subprocess.run(
        [*TOOLBOX, "launch", "--config", "work/r/config/train.yaml", "--data", "work/r/data",
         "--out", "work/r/train", "launcher.name=slurm"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    job_id = json.loads(proc.stdout.strip().splitlines()[-1])["job_id"]
    try:
        shown = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
        ).stdout
    finally:
        subprocess.run(["scancel", job_id], check=False)  # the request is what is checked, not the run
    assert " TimeLimit=00:05:00 " in shown, shown
    assert "MinMemoryNode=700M" in shown, shown
