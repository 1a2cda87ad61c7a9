"""``launcher=slurm launcher.nodes=2`` on the two-node cluster of workflow/scripts/local_slurm.sh.

Each node is a slurmd in its own network namespace (its own address and hostname); the job's two
nodes meet at a c10d rendezvous on the first one and train with gloo on CPU. A run across the two
nodes follows the one-process run with the same global batch (per-step loss rtol 1e-5, final weights
atol 1e-5, as tests/distributed/test_two_processes.py), its checkpoints are written once and resume
on either node, and ``scontrol requeue`` of the two-node job resumes to the same weights, bit for bit,
as an uninterrupted run with the same two ranks.

Start the cluster with ``bash workflow/scripts/local_slurm.sh ensure --nodes 2``; with fewer nodes
(or none) every test here is skipped with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "workflow" / "scripts" / "local_slurm.sh"
TOOLBOX = [sys.executable, "-m", "toolbox.cli"]
# tests/distributed/test_two_processes.py's config: 2 ranks x batch 8 = 1 process x batch 16
BASE = [
    "model.hidden_size=64", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=128",
    "data.source.num_train=256", "data.source.num_test=32", "eval=lm", "device=cpu",
    "trainer.max_steps=8", "trainer.save_every=4", "trainer.eval_every=0",
    "callbacks=default", "~callbacks.console", "callbacks.checkpoint.keep_last=0",
]  # fmt: skip
SLURM = ["launcher=slurm", "launcher.time_min=15", "launcher.poll_s=0.5", "launcher.omp_num_threads=1"]
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-5


@pytest.fixture(scope="module", autouse=True)
def two_nodes() -> list[str]:
    """The cluster's node names; skips (with the reason) unless it is up with at least two."""
    pytest.importorskip("submitit")
    try:
        res = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.skip("local SLURM cluster: 'local_slurm.sh status' timed out")
    start = f"start it with: bash {SCRIPT.relative_to(REPO)} ensure --nodes 2"
    if res.returncode != 0:
        lines = (res.stdout + res.stderr).strip().splitlines()
        pytest.skip(f"{lines[0] if lines else 'local SLURM cluster not running'}; {start}")
    for tool in ("sbatch", "sinfo", "scontrol", "squeue"):
        if shutil.which(tool) is None:
            pytest.skip(f"local SLURM cluster: {tool} not on PATH")
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%N"], capture_output=True, text=True)
    nodes = sorted(set(out.stdout.split()))
    if len(nodes) < 2:
        fallback = [line.strip() for line in res.stdout.splitlines() if "fallback:" in line]
        pytest.skip(
            f"local SLURM cluster has {len(nodes)} node(s), 2 needed ({'; '.join(fallback) or start})"
        )
    return nodes


def toolbox(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*TOOLBOX, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def train_losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["split"] == "train"]


def exported_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(run_dir / "model" / "model.safetensors")


def assert_weights_close(a: dict, b: dict) -> None:
    """Every tensor of ``b`` is in ``a`` and close (FSDP's export also writes the tied ``lm_head``)."""
    assert b.keys() <= a.keys(), b.keys() - a.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in b)
    assert worst < WEIGHT_ATOL, worst


def job_hosts(run_dir: Path) -> set[str]:
    """The hostnames submitit's job log reports, over every task of every job of the run."""
    logs = (run_dir / "launch" / "slurm").glob("*_log.out")
    text = "".join(p.read_text() for p in logs)
    return {part.split(",")[0] for part in text.split("hostname=")[1:]}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """One process, batch 16, in this process: the curve the two-node runs must follow."""
    from toolbox.experiment import load_config, run_experiment

    run_dir = tmp_path_factory.mktemp("single") / "run"
    run_experiment(load_config([*BASE, "trainer.batch_size=16", f"run_dir={run_dir}"]))
    return run_dir


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_nodes_follow_one_process_and_resume_on_either_node(strategy, tmp_path, reference, two_nodes):
    run_dir = tmp_path / "two_nodes"
    toolbox("launch", *BASE, *SLURM, "launcher.nodes=2", f"strategy={strategy}", "trainer.batch_size=8",
            f"run_dir={run_dir}", "--wait")  # fmt: skip
    assert job_hosts(run_dir) == set(two_nodes[:2])  # one task on each node
    np.testing.assert_allclose(train_losses(run_dir), train_losses(reference), rtol=LOSS_RTOL)
    assert_weights_close(exported_weights(run_dir), exported_weights(reference))

    # written once: one checkpoint per save, complete (manifest last), no leftovers from the other node
    checkpoints = run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_00000004", "step_00000008"]
    step4 = checkpoints / "step_00000004"
    manifest = json.loads((step4 / "manifest.json").read_text())
    files = {p.relative_to(step4).as_posix() for p in step4.rglob("*") if p.is_file()}
    assert files == {"manifest.json", *manifest["files"]}, (files, manifest)
    if strategy == "fsdp":  # every rank's shard once, plus DCP's metadata
        assert len(list((step4 / "sharded").glob("*.distcp"))) == 2
    else:
        assert (step4 / "state.pt").is_file() and not (step4 / "sharded").exists()

    # resume on either node: the second node alone, one process, from the two-node checkpoint
    resumed = tmp_path / "resumed"
    toolbox("launch", *BASE, *SLURM, f"+launcher.additional.nodelist={two_nodes[1]}",
            "trainer.batch_size=16", f"resume_from={step4}", f"run_dir={resumed}", "--wait")  # fmt: skip
    assert job_hosts(resumed) == {two_nodes[1]}
    np.testing.assert_allclose(train_losses(resumed), train_losses(reference)[4:], rtol=LOSS_RTOL)
    assert_weights_close(exported_weights(resumed), exported_weights(reference))


def _final_state(run_dir: Path) -> dict[str, torch.Tensor]:
    from toolbox.core.checkpointer import Checkpointer

    _, state = Checkpointer(run_dir).load_latest()
    return state["model"]


def _requeue_and_start(job_id: str, deadline: float) -> None:
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    while True:  # a requeued job waits ~2 min before it is eligible again: let it start now
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
        if state.stdout.strip().startswith("PENDING"):
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
            return
        assert state.stdout.strip(), f"job {job_id} ended instead of being requeued"
        assert time.time() < deadline, f"job {job_id} was not requeued: {state.stdout!r}"
        time.sleep(0.2)


# not slow: CI runs it (about 2.5 min on the shared 2-core machine; two two-rank runs, one interrupted)
def test_scontrol_requeue_of_a_two_node_job_resumes_bitwise(tmp_path, two_nodes):
    from toolbox.core.registries import LAUNCHERS
    from toolbox.experiment import load_config

    steps = [*BASE, "trainer.max_steps=300", "trainer.save_every=5", "model.dropout=0.1",
             "callbacks.checkpoint.keep_last=2", "strategy=ddp", "trainer.batch_size=8"]  # fmt: skip
    cfg = load_config([*steps, *SLURM, "launcher.nodes=2", f"run_dir={tmp_path / 'job'}"])
    launcher = LAUNCHERS.build(cfg.launcher)
    job = launcher.submit(cfg)
    deadline = time.time() + 600
    checkpoints = tmp_path / "job" / "checkpoints"
    while not any(checkpoints.glob("step_*/manifest.json")):
        assert time.time() < deadline and not job.done(), "the job never wrote a checkpoint"
        time.sleep(0.05)
    _requeue_and_start(str(job.job_id), deadline)

    # the same two ranks uninterrupted, on this machine (gloo's sum of two ranks is order-free)
    reference = tmp_path / "reference"
    toolbox("launch", *steps, "launcher=torchrun", "launcher.nproc=2", "launcher.omp_num_threads=1",
            f"run_dir={reference}")  # fmt: skip

    result = launcher.wait(job, stream=False)
    assert result["step"] == 300
    assert result["resumed_from"] is not None and 5 <= result["resumed_from"] < 300
    assert job_hosts(tmp_path / "job") == set(two_nodes[:2])
    resumed, expected = _final_state(tmp_path / "job"), _final_state(reference)
    assert resumed.keys() == expected.keys()
    for k in expected:
        assert torch.equal(resumed[k], expected[k]), k
