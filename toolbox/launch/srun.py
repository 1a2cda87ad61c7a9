"""The srun launcher: torchrun on every node of the SLURM allocation the command already runs in.

::

    # in a job of several nodes (sbatch -N 2, or a Snakemake rule with resources: nodes: 2)
    toolbox train experiment=sft_arith strategy=ddp launcher=srun launcher.nproc=1

``launcher=slurm`` submits a new job; this one runs inside an existing job, as the workflow's train
stage does under ``snakemake --profile slurm``: it starts one task per node of the allocation
(``srun --overlap --nodes=N --ntasks=N --ntasks-per-node=1``), each running torchrun with ``nproc``
workers, the nodes meeting at a c10d rendezvous on the allocation's first node (the same per-node
job as ``launcher=slurm``). Rank 0 writes ``<run_dir>/launch/result.json``; the launcher returns
its metrics.

Outside a SLURM job (no ``SLURM_JOB_ID``) it runs the same world size on this machine:
``nodes x nproc`` processes under torchrun (``nodes`` defaults to 1 there), so a run gives the
same numbers with or without the cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

from omegaconf import DictConfig

from toolbox.core.bounds import AtLeastOne
from toolbox.core.errors import ConfigError
from toolbox.core.output import check_output_dir
from toolbox.core.registries import LAUNCHERS
from toolbox.launch import LaunchError
from toolbox.launch.torchrun import TorchrunLauncher, write_launch_config

# The SLURM_* variables that name the job (kept for the new step); every other one describes the
# step this process runs in and would shrink the new step to it.
JOB_IDENTITY = frozenset({
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTER_NAME", "SLURM_CONF", "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
})  # fmt: skip


def allocation_nodes() -> int | None:
    """The node count of the SLURM job this process runs in (asked of slurmctld), or None outside one.

    Not from the environment: inside a job step (Snakemake's SLURM jobstep runs every rule under
    ``srun -n1``) ``SLURM_NNODES`` and ``SLURM_JOB_NODELIST`` describe the one-node step, not the job.
    """
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(
            f"srun: cannot ask slurmctld for job {job}'s nodes ({exc}); is scontrol on PATH?"
        ) from exc
    found = re.search(r"\bNumNodes=(\d+)", out.stdout)
    if out.returncode != 0 or not found:
        raise LaunchError(
            f"srun: 'scontrol show job {job}' did not give the job's node count "
            f"({(out.stderr or out.stdout).strip()[:200] or f'exit status {out.returncode}'})."
        )
    return int(found.group(1))


def step_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a new step of the same job: SLURM_* reduced to the job's identity (JOB_IDENTITY)."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_") or k in JOB_IDENTITY}


@LAUNCHERS.register("srun")
class SrunLauncher:
    """Runs the experiment across the nodes of the current SLURM allocation; rank 0's metrics.

    Args:
        nproc: training processes per node.
        nodes: nodes to use (null: every node of the allocation; outside SLURM: 1). More than the
            allocation has is an error.
        omp_num_threads: OMP_NUM_THREADS of each worker (null: torchrun's default).
        srun_args: extra srun options, e.g. [--cpu-bind=none].
    """

    def __init__(
        self, nproc: AtLeastOne = 1, nodes: AtLeastOne | None = None,
        omp_num_threads: AtLeastOne | None = None,
        srun_args: list[str] | None = None,
    ) -> None:  # fmt: skip
        if nproc < 1 or (nodes is not None and nodes < 1):
            raise ConfigError(
                f"launcher.nproc and launcher.nodes must be at least 1, got {nproc} and {nodes}."
            )
        self.nproc = nproc
        self.nodes = nodes
        self.omp_num_threads = omp_num_threads
        self.srun_args = [str(a) for a in srun_args or []]

    def command(self, config_path: str, nodes: int) -> list[str]:
        """The srun command line that starts one node task per node (each runs torchrun)."""
        node = [sys.executable, "-m", "toolbox.launch.srun", config_path, str(self.nproc)]
        if self.omp_num_threads is not None:
            node.append(str(self.omp_num_threads))
        srun = ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1"]
        return [*srun, "--kill-on-bad-exit=1", *self.srun_args, *node]

    def launch(self, cfg: DictConfig) -> dict[str, float]:
        return self.run(cfg)["metrics"]

    def run(self, cfg: DictConfig) -> dict[str, Any]:
        from toolbox.launch.worker import read_result

        check_output_dir(cfg.run_dir)  # before any node starts: every rank writes there
        have = allocation_nodes()
        if have is None:
            local = TorchrunLauncher(
                nproc=self.nproc * (self.nodes or 1), omp_num_threads=self.omp_num_threads
            )
            print("launcher=srun outside a SLURM job: torchrun on this machine", file=sys.stderr, flush=True)
            return local.run(cfg)
        nodes = self.nodes or have
        if nodes > have:
            raise ConfigError(
                f"launcher.nodes={nodes} but this SLURM job has {have} node(s): ask for {nodes} nodes "
                "(sbatch -N, or resources: nodes: in config/config.yaml) or lower launcher.nodes."
            )
        config_path = write_launch_config(cfg)
        result_path = config_path.parent / "result.json"
        result_path.unlink(missing_ok=True)
        env = step_env({**os.environ, "PYTHONUNBUFFERED": "1"})
        proc = subprocess.run(self.command(str(config_path.resolve()), nodes), env=env, check=False)
        if proc.returncode != 0:
            raise LaunchError(
                f"srun: a node's torchrun failed (exit status {proc.returncode}); its output is above and "
                f"every rank's output is under {config_path.parent / 'logs'}.",
                exit_code=proc.returncode,
            )
        if not result_path.is_file():
            raise LaunchError(f"srun: the nodes exited cleanly but wrote no {result_path}.")
        return read_result(result_path)


def step_hostnames() -> list[str]:
    """The hostnames of the current srun step, in node order (``scontrol show hostnames``)."""
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ["SLURM_JOB_NODELIST"]
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def _node_main(argv: list[str]) -> int:
    """One node's task of the step: torchrun for this node, rank ``SLURM_PROCID`` (one task per node)."""
    import random

    from omegaconf import OmegaConf

    config_path, nproc = argv[0], int(argv[1])
    omp = int(argv[2]) if len(argv) > 2 else None
    hosts = step_hostnames()
    step = f"{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
    port = random.Random(step).randint(20000, 60000)
    torchrun = TorchrunLauncher(
        nproc=nproc, nnodes=len(hosts), node_rank=int(os.environ["SLURM_PROCID"]),
        rdzv_endpoint=f"{hosts[0]}:{port}" if len(hosts) > 1 else None, rdzv_id=step, omp_num_threads=omp,
    )  # fmt: skip
    torchrun.run(OmegaConf.load(config_path))
    return 0


if __name__ == "__main__":
    sys.exit(_node_main(sys.argv[1:]))
