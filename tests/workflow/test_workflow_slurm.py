"""The tiny pipeline through `snakemake --profile slurm` on the real local cluster.

Every rule becomes a SLURM job (sbatch) of the repo's own profile, slurm/config.yaml, typed as a
user types it from the repo root. Skips, with the reason, where the cluster of
workflow/scripts/local_slurm.sh is not running (CI starts it: `local_slurm.sh ensure`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from workflow_copy import REPO, TINY_RUN, copy_workflow, tiny_config, tool

# CI (`.ci/run`: -m "slurm and not slow") runs the two-node train stage and the estimated-limit job
# (about 4 min each on the shared 2-core machine); the whole pipeline (about 6 min) is slow
pytestmark = pytest.mark.slurm
SCRIPT = REPO / "workflow" / "scripts" / "local_slurm.sh"


@pytest.fixture(scope="module")
def cluster() -> None:
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT.relative_to(REPO)} not found")
    try:
        res = subprocess.run(
            ["bash", str(SCRIPT), "status"], capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.skip("local SLURM cluster: 'local_slurm.sh status' timed out")
    if res.returncode != 0:
        first = (res.stdout + res.stderr).strip().splitlines()
        pytest.skip(
            f"local SLURM cluster not running ({first[0] if first else f'status exit {res.returncode}'}); "
            f"start it with: bash {SCRIPT.relative_to(REPO)} ensure"
        )
    for name in ("sbatch", "sacct", "squeue"):
        if shutil.which(name) is None:
            pytest.skip(f"local SLURM cluster: {name} not on PATH")


@pytest.mark.slow  # every rule of the tiny pipeline is a SLURM job
def test_tiny_pipeline_through_the_slurm_profile(cluster, tmp_path: Path) -> None:
    cfg = tiny_config()
    entry = cfg["runs"][TINY_RUN]
    entry["overrides"] = [o for o in entry["overrides"] if not o.startswith("trainer.max_steps=")] + [
        "trainer.max_steps=10"
    ]
    entry["resources"] = {"cpus": 1, "mem_mb": 1500, "runtime": 7}
    wf = copy_workflow(tmp_path / "repo", cfg)

    res = wf.snakemake("--profile", "slurm", f"results/{TINY_RUN}/", timeout=900)
    out = res.stdout + res.stderr
    assert "slurm" in out.lower()
    assert wf.ran(out) >= {"defaults", "compose", "data", "train", "eval", "check", "plot", "publish"}, out[
        -4000:
    ]
    assert "Submitted job" in out or "job ID" in out or "SLURM run ID" in out, out[-4000:]

    # the train job asked for its run's resources, every other job for the profile's defaults
    run_id = re.search(r"SLURM run ID: (\S+)", out)
    assert run_id, out[-4000:]
    acct = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--name", run_id.group(1), "-S", "now-1days", "-o", "ReqMem,Timelimit,State"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    # defaults, compose, data, eval, check, plot, publish at the profile's defaults
    assert sorted(acct) == ["1500M|00:07:00|COMPLETED"] + ["2000M|00:10:00|COMPLETED"] * 7, acct

    results = wf.root / "results" / TINY_RUN
    assert (results / "model" / "model.safetensors").exists()
    assert "eval/loss" in json.loads((results / "eval.json").read_text())
    assert (results / "metrics.jsonl").read_text().strip()

    again = wf.snakemake("--profile", "slurm", f"results/{TINY_RUN}/", timeout=300)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_two_node_train_stage_through_the_slurm_profile(cluster, tmp_path: Path) -> None:
    """A run whose resources ask for two nodes trains across both (launcher=srun: DDP, gloo)."""
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    if len(set(nodes)) < 2:
        pytest.skip(f"the local SLURM cluster has {len(set(nodes))} node(s); start two: "
                    f"bash {SCRIPT.relative_to(REPO)} ensure --nodes 2")  # fmt: skip
    cfg = tiny_config()
    entry = cfg["runs"][TINY_RUN]
    entry["overrides"] = [o for o in entry["overrides"] if not o.startswith("trainer.max_steps=")] + [
        "trainer.max_steps=10", "strategy=ddp", "launcher=srun", "launcher.omp_num_threads=1",
    ]  # fmt: skip
    entry["resources"] = {"cpus": 1, "mem_mb": 1500, "runtime": 9, "nodes": 2}
    wf = copy_workflow(tmp_path / "repo", cfg)

    # the stages before train here, then the train stage alone through the profile: one SLURM job,
    # not eight (the test above runs every stage through it)
    wf.snakemake("-c1", f"work/{TINY_RUN}/data", timeout=600)
    res = wf.snakemake("--profile", "slurm", f"work/{TINY_RUN}/train/model", timeout=900)
    out = res.stdout + res.stderr
    assert wf.ran(out) == {"train"}, out[-4000:]
    run_id = re.search(r"SLURM run ID: (\S+)", out)
    assert run_id, out[-4000:]
    acct = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--name", run_id.group(1), "-S", "now-1days", "-o", "NNodes,Timelimit,State"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "2|00:09:00|COMPLETED" in acct, acct  # the train job: two nodes, its own time limit

    result = json.loads((wf.root / "work" / TINY_RUN / "train" / "launch" / "result.json").read_text())
    assert result["world_size"] == 2 and result["step"] == 10
    logs = wf.root / "work" / TINY_RUN / "train" / "launch" / "logs"
    assert len(list(logs.rglob("stdout.log"))) == 2  # one worker on each node (torchrun's per-node log dir)
    assert (wf.root / "work" / TINY_RUN / "train" / "model" / "model.safetensors").exists()


def test_a_train_job_given_its_estimated_limit_finishes_inside_it(cluster, tmp_path: Path) -> None:
    """`toolbox plan --estimate`, then the profile submits the train job with the estimate's request."""
    wf = copy_workflow(tmp_path / "repo", tiny_config(resources={"cpus": 1}))  # no runtime, no mem_mb
    # composes the run, builds its data (here, not as jobs) and calibrates the train stage
    wf.run(tool("toolbox"), "plan", "--estimate", f"results/{TINY_RUN}/", timeout=900)
    request = json.loads((wf.root / "work" / TINY_RUN / "estimate" / "train.json").read_text())["slurm"]
    # launcher=slurm, given the train stage's own config, finds the same request in that record
    from toolbox.experiment import compose_run
    from toolbox.results.estimated_request import request_for_config

    run = wf.root / "work" / TINY_RUN
    submitted = compose_run(
        ["launcher.name=slurm"], run / "config" / "train.yaml", run_dir=run / "train", data_dir=run / "data"
    )
    assert request_for_config(submitted) == {k: request[k] for k in ("runtime", "mem_mb")}, request

    res = wf.snakemake("--profile", "slurm", f"work/{TINY_RUN}/train/model", timeout=900)
    out = res.stdout + res.stderr
    assert wf.ran(out) == {"train"}, out[-4000:]
    run_id = re.search(r"SLURM run ID: (\S+)", out)
    assert run_id, out[-4000:]
    acct = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--name", run_id.group(1), "-S", "now-1days",
         "-o", "ReqMem,TimelimitRaw,ElapsedRaw,State"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert len(acct) == 1, acct
    mem, limit_min, elapsed_s, state = acct[0].split("|")
    assert (mem, int(limit_min), state) == (f"{request['mem_mb']}M", request["runtime"], "COMPLETED"), acct
    assert int(elapsed_s) < int(limit_min) * 60, acct
    assert (wf.root / "work" / TINY_RUN / "train" / "model" / "model.safetensors").exists()
