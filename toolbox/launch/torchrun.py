"""The torchrun launcher: ``nproc`` processes per node, each running the same composed config.

::

    toolbox launch experiment=sft_arith launcher=torchrun strategy=ddp launcher.nproc=2

writes the composed config to ``<run_dir>/launch/config.yaml`` and runs
``python -m torch.distributed.run --nproc-per-node N ... -m toolbox.launch.worker <config>``.
Rank 0 writes ``<run_dir>/launch/result.json``; the launcher returns its metrics. Per-rank logs go
to ``<run_dir>/launch/logs`` (and to the console). Any worker exiting non-zero makes torchrun stop
the others and the launcher raise ``LaunchError`` with the exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from toolbox.core.bounds import AtLeastOne, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.output import check_output_dir
from toolbox.core.registries import LAUNCHERS
from toolbox.launch import LaunchError

LAUNCH_DIR = "launch"


def write_launch_config(cfg: DictConfig, name: str = "config.yaml") -> Path:
    """The composed config, resolved, at ``<run_dir>/launch/<name>`` (what every worker reads)."""
    from toolbox.core.atomic import atomic_write_text

    path = Path(cfg.run_dir) / LAUNCH_DIR / name
    atomic_write_text(path, OmegaConf.to_yaml(cfg, resolve=True))
    return path


@LAUNCHERS.register("torchrun")
class TorchrunLauncher:
    """Runs the experiment under ``torch.distributed.run`` (torchrun) and returns rank 0's metrics.

    Args:
        nproc: processes on this node (one per GPU; on CPU, at most one per core group).
        nnodes: number of nodes; start the same command on each with its ``node_rank``.
        node_rank: this node's index (0 on the node that hosts the rendezvous).
        rdzv_backend: c10d (torchrun's rendezvous server) or static (MASTER_ADDR/PORT).
        rdzv_endpoint: host:port of the rendezvous; null on one node: 127.0.0.1 and a free port.
        rdzv_id: a job id shared by all nodes of one run (c10d); null: the run's name.
        max_restarts: restart the whole group this many times after a worker fails.
        omp_num_threads: OMP_NUM_THREADS of each worker (null: torchrun's default, 1).
        python: interpreter for the workers (null: this one).
    """

    def __init__(
        self,
        nproc: AtLeastOne = 1,
        nnodes: AtLeastOne = 1,
        node_rank: NonNegativeInt = 0,
        rdzv_backend: str = "c10d",
        rdzv_endpoint: str | None = None,
        rdzv_id: str | None = None,
        max_restarts: NonNegativeInt = 0,
        omp_num_threads: AtLeastOne | None = None,
        python: str | None = None,
    ) -> None:
        if nproc < 1 or nnodes < 1:
            raise ConfigError(
                f"launcher.nproc and launcher.nnodes must be at least 1, got {nproc} and {nnodes}."
            )
        if not 0 <= node_rank < nnodes:
            raise ConfigError(f"launcher.node_rank={node_rank} must lie in [0, {nnodes}).")
        if rdzv_backend not in ("c10d", "static"):
            raise ConfigError(f"launcher.rdzv_backend: '{rdzv_backend}' is not one of c10d, static.")
        if nnodes > 1 and not rdzv_endpoint:
            raise ConfigError(
                "launcher.rdzv_endpoint: a run over several nodes needs the host:port of node 0 "
                "(launcher=slurm fills it in inside an allocation)."
            )
        self.nproc = nproc
        self.nnodes = nnodes
        self.node_rank = node_rank
        self.rdzv_backend = rdzv_backend
        self.rdzv_endpoint = rdzv_endpoint
        self.rdzv_id = rdzv_id
        self.max_restarts = max_restarts
        self.omp_num_threads = omp_num_threads
        self.python = python

    def command(self, config_path: Path, result_path: Path, log_dir: Path, run_id: str) -> list[str]:
        """The torchrun command line that starts this node's workers."""
        from toolbox.distributed.process_group import free_port

        cmd = [self.python or sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={self.nproc}"]
        if self.nnodes == 1 and not self.rdzv_endpoint:
            cmd += [
                "--nnodes=1",
                "--rdzv-backend=static",
                "--master-addr=127.0.0.1",
                f"--master-port={free_port()}",
            ]
        elif self.rdzv_backend == "static":
            host, _, port = self.rdzv_endpoint.rpartition(":")
            cmd += [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}", "--rdzv-backend=static",
                    f"--master-addr={host}", f"--master-port={port}"]  # fmt: skip
        else:
            cmd += [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={self.rdzv_endpoint}", f"--rdzv-id={self.rdzv_id or run_id}"]  # fmt: skip
        cmd += [f"--max-restarts={self.max_restarts}", f"--log-dir={log_dir}", "--tee=3"]
        return [*cmd, "-m", "toolbox.launch.worker", str(config_path), "--result", str(result_path)]

    def launch(self, cfg: DictConfig) -> dict[str, float]:
        return self.run(cfg)["metrics"]

    def run(self, cfg: DictConfig) -> dict[str, Any]:
        """Start the workers, wait for them, return rank 0's result (metrics, step, world_size, ...)."""
        from toolbox.launch.worker import read_result

        check_output_dir(cfg.run_dir)  # before any process starts: every rank writes there
        config_path = write_launch_config(cfg)
        launch_dir = config_path.parent
        result_path = launch_dir / "result.json"
        result_path.unlink(missing_ok=True)
        log_dir = launch_dir / "logs"
        env = dict(os.environ)
        if self.omp_num_threads is not None:
            env["OMP_NUM_THREADS"] = str(self.omp_num_threads)
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = self.command(config_path, result_path, log_dir, str(cfg.get("run_name", "toolbox")))
        proc = subprocess.run(cmd, env=env, check=False)
        if proc.returncode != 0:
            raise LaunchError(
                f"torchrun: a worker failed (exit status {proc.returncode}); the failing rank's traceback "
                f"is printed above and every rank's output is under {log_dir}.",
                exit_code=proc.returncode,
            )
        if self.node_rank != 0:
            return {"metrics": {}, "run_dir": str(cfg.run_dir)}  # rank 0 lives on node 0
        if not result_path.is_file():
            raise LaunchError(f"torchrun: the workers exited cleanly but wrote no {result_path}.")
        return read_result(result_path)
