"""Checks against the real single-node SLURM cluster of workflow/scripts/local_slurm.sh.

CI starts the cluster before pytest (``bash workflow/scripts/local_slurm.sh ensure``); where it
is not running every test here is skipped, with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "workflow" / "scripts" / "local_slurm.sh"
TERMINAL_FAILURES = ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE")


def _run(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session", autouse=True)
def local_slurm() -> str:
    """Skip (with the reason) unless ``local_slurm.sh status`` says the cluster is up."""
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT} not found")
    if shutil.which("bash") is None:
        pytest.skip("bash not found")
    try:
        res = _run("bash", str(SCRIPT), "status", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.skip("local SLURM cluster: 'local_slurm.sh status' timed out")
    if res.returncode != 0:
        lines = (res.stdout + res.stderr).strip().splitlines()
        reason = lines[0] if lines else f"local_slurm.sh status exited {res.returncode}"
        pytest.skip(f"{reason}; start it with: bash {SCRIPT.relative_to(REPO)} ensure")
    for tool in ("sbatch", "sacct", "sinfo"):
        if shutil.which(tool) is None:
            pytest.skip(f"local SLURM cluster: {tool} not on PATH")
    return res.stdout


def _sacct_state(job_id: str) -> str:
    res = _run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State")
    lines = res.stdout.strip().splitlines()
    return lines[0].strip() if res.returncode == 0 and lines else ""


def test_sbatch_job_completes_in_sacct(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    sub = _run(
        "sbatch", "--parsable", "-p", "debug", "-t", "1", "--mem=100M", "-J", "toolbox-test",
        "-o", str(out), "--wrap", "echo hello-from-slurm",
    )  # fmt: skip
    assert sub.returncode == 0, f"sbatch failed: {sub.stderr}"
    job_id = sub.stdout.strip().split(";")[0]
    assert job_id.isdigit(), f"unexpected sbatch output: {sub.stdout!r}"

    deadline = time.monotonic() + 90
    state = ""
    while time.monotonic() < deadline:
        state = _sacct_state(job_id)
        if state == "COMPLETED" or state.startswith(TERMINAL_FAILURES):
            break
        time.sleep(0.5)
    else:
        _run("scancel", job_id)
    assert state == "COMPLETED", f"job {job_id}: sacct state {state!r} (expected COMPLETED within 90 s)"
    assert out.read_text().strip() == "hello-from-slurm"


def test_sinfo_shows_partition_debug() -> None:
    res = _run("sinfo", "-h", "-o", "%P %a")
    assert res.returncode == 0, f"sinfo failed: {res.stderr}"
    partitions = dict(line.split() for line in res.stdout.strip().splitlines())
    # the trailing * marks the default partition
    assert "debug*" in partitions, f"no default partition 'debug' in sinfo: {res.stdout!r}"
    assert partitions["debug*"] == "up"


def test_two_nodes_each_have_their_own_hostname_and_address(local_slurm: str) -> None:
    nodes = sorted(set(_run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N").stdout.split()))
    if len(nodes) < 2:
        pytest.skip(
            f"the cluster has {len(nodes)} node(s); start two: bash {SCRIPT.relative_to(REPO)} ensure --nodes 2"
        )
    res = _run(
        "srun", "-N2", "--ntasks-per-node=1", "--mem=100M", "-t", "1",
        "python3", "-c", "import socket; h = socket.gethostname(); print(h, socket.gethostbyname(h))",
        timeout=90,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    seen = dict(line.split() for line in res.stdout.strip().splitlines())
    assert sorted(seen) == nodes[:2], res.stdout
    addresses = set(seen.values())
    assert len(addresses) == 2 and not any(a.startswith("127.") for a in addresses), seen
