"""The SLURM launcher: the same composed config as a submitit job, requeued on preemption or timeout.

::

    toolbox launch experiment=sft_arith launcher=slurm launcher.partition=gpu launcher.nproc=4 \\
        launcher.gpus_per_node=4 strategy=fsdp --wait

Inside the allocation the job runs in one of three ways:

- one process in all (``nodes=1, nproc=1``): the experiment runs in the job's own process;
- ``mode=torchrun`` (default): one SLURM task per node starts torchrun with ``nproc`` workers, the
  nodes meeting at a c10d rendezvous on the first node of the allocation;
- ``mode=tasks``: one SLURM task per rank (``tasks_per_node=nproc``), each exporting the torch
  environment (``submitit.helpers.TorchDistributedEnvironment``) and training.

Preemption or a timeout warning (``USR2``, ``signal_delay_s`` before the end) makes submitit call
the job's ``__submitit_checkpoint__``, which resubmits it with ``resume_from=auto`` and requeues it;
a job requeued by the cluster itself (``scontrol requeue``, ``SLURM_RESTART_COUNT > 0``) resumes the
same way. The run continues from its newest checkpoint (``trainer.save_every``).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import sys
import time
from pathlib import Path
from typing import IO, Any

from omegaconf import DictConfig, OmegaConf

from toolbox.core.bounds import AtLeastOne, NonNegativeInt, PositiveFloat
from toolbox.core.errors import ConfigError
from toolbox.core.output import check_output_dir
from toolbox.core.registries import LAUNCHERS
from toolbox.launch import LaunchError
from toolbox.launch.torchrun import LAUNCH_DIR, write_launch_config

MODES = ("torchrun", "tasks")
DEFAULT_TIME_MIN = 60  # the time limit of a job without launcher.time_min and without an estimate


class SlurmTrainJob:
    """The callable submitit pickles: trains one config inside the allocation (see the module doc).

    submitit calls ``__submitit_checkpoint__`` when the job is preempted or times out.
    """

    def __init__(
        self, config_path: str, workdir: str, mode: str = "torchrun", nproc: int = 1, resume: bool = False,
        omp_num_threads: int | None = None,
    ) -> None:  # fmt: skip
        self.config_path = config_path
        self.workdir = workdir
        self.mode = mode
        self.nproc = nproc
        self.resume = resume
        self.omp_num_threads = omp_num_threads

    def __call__(self) -> dict[str, Any]:
        import submitit

        os.chdir(self.workdir)
        cfg = OmegaConf.load(self.config_path)
        requeued = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0
        if (self.resume or requeued) and not cfg.get("resume_from"):
            cfg.resume_from = "auto"  # continue from the newest checkpoint of run_dir
        if self.omp_num_threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(self.omp_num_threads)
        env = submitit.JobEnvironment()
        if self.mode == "tasks":
            from toolbox.launch.worker import run_config

            submitit.helpers.TorchDistributedEnvironment().export(
                set_cuda_visible_devices=False, overwrite=True
            )
            return _public(run_config(cfg))
        if env.num_nodes * self.nproc == 1:
            from toolbox.launch.worker import run_config

            return _public(run_config(cfg))
        from toolbox.launch.torchrun import TorchrunLauncher

        multi = env.num_nodes > 1
        port = random.Random(env.job_id).randint(20000, 60000)
        torchrun = TorchrunLauncher(
            nproc=self.nproc, nnodes=env.num_nodes, node_rank=env.node,
            rdzv_endpoint=f"{env.hostnames[0]}:{port}" if multi else None, rdzv_id=str(env.job_id),
            omp_num_threads=self.omp_num_threads,
        )  # fmt: skip
        return torchrun.run(cfg)

    def __submitit_checkpoint__(self, *args: Any, **kwargs: Any):
        """Preempted or timing out: requeue the same job, resuming from the newest checkpoint."""
        from submitit.helpers import DelayedSubmission

        again = SlurmTrainJob(
            self.config_path, self.workdir, self.mode, self.nproc, True, self.omp_num_threads
        )
        return DelayedSubmission(again, *args, **kwargs)

    checkpoint = __submitit_checkpoint__


def _public(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "is_main"}


@LAUNCHERS.register("slurm")
class SlurmLauncher:
    """Submits the run as a SLURM job through submitit; ``launch`` waits and returns its metrics.

    Args:
        partition: SLURM partition (null: the cluster's default).
        time_min: wall-clock limit of the job in minutes (null: the matching `toolbox plan --estimate`, else 60).
        nodes: number of nodes.
        nproc: training processes per node (one per GPU).
        mode: torchrun (one task per node running torchrun) or tasks (one SLURM task per process).
        cpus_per_task: CPUs of each task (with mode=torchrun one task holds all of a node's workers).
        mem_gb: memory per node in GB (null: the matching `toolbox plan --estimate`, else the cluster default).
        gpus_per_node: GPUs per node (0 on CPU clusters).
        account: SLURM account to charge.
        qos: quality of service.
        constraint: node features required (--constraint).
        job_name: the job's name (null: the run's name).
        max_requeues: how many times a job that times out is requeued (preemptions do not count).
        signal_delay_s: seconds before the time limit at which the job is warned (USR2) and requeued.
        setup: shell lines run in the job before training (module load, source venv/bin/activate).
        additional: extra sbatch options, e.g. {reservation: abc}.
        omp_num_threads: OMP_NUM_THREADS inside the job (null: leave it to SLURM / torchrun).
        cluster: slurm, or local / debug to run the same job through submitit without a cluster.
        folder: where submitit keeps job files and logs, relative to run_dir.
        poll_s: seconds between checks while waiting for the job.

    Where ``time_min`` or ``mem_gb`` is unset and ``toolbox plan --estimate`` measured this very
    config (``--config work/<run>/config/train.yaml --data work/<run>/data``: the estimate
    ``work/<run>/estimate/train.json``), the job asks for the estimate's ``--time`` and ``--mem``,
    margins included, as the workflow's SLURM profile does (toolbox/results/estimated_request.py).
    """

    def __init__(
        self,
        partition: str | None = None,
        time_min: AtLeastOne | None = None,
        nodes: AtLeastOne = 1,
        nproc: AtLeastOne = 1,
        mode: str = "torchrun",
        cpus_per_task: AtLeastOne | None = None,
        mem_gb: PositiveFloat | None = None,
        gpus_per_node: NonNegativeInt = 0,
        account: str | None = None,
        qos: str | None = None,
        constraint: str | None = None,
        job_name: str | None = None,
        max_requeues: NonNegativeInt = 3,
        signal_delay_s: NonNegativeInt = 90,
        setup: list[str] | None = None,
        additional: dict[str, Any] | None = None,
        omp_num_threads: AtLeastOne | None = None,
        cluster: str = "slurm",
        folder: str = f"{LAUNCH_DIR}/slurm",
        poll_s: PositiveFloat = 1.0,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"launcher.mode: '{mode}' is not one of {', '.join(MODES)}.")
        if nodes < 1 or nproc < 1:
            raise ConfigError(
                f"launcher.nodes and launcher.nproc must be at least 1, got {nodes} and {nproc}."
            )
        if cluster not in ("slurm", "local", "debug"):
            raise ConfigError(f"launcher.cluster: '{cluster}' is not one of slurm, local, debug.")
        self.partition = partition
        self.time_min = time_min
        self.nodes = nodes
        self.nproc = nproc
        self.mode = mode
        self.cpus_per_task = cpus_per_task
        self.mem_gb = mem_gb
        self.gpus_per_node = gpus_per_node
        self.account = account
        self.qos = qos
        self.constraint = constraint
        self.job_name = job_name
        self.max_requeues = max_requeues
        self.signal_delay_s = signal_delay_s
        self.setup = list(setup or [])
        self.additional = dict(additional or {})
        self.omp_num_threads = omp_num_threads
        self.cluster = cluster
        self.folder = folder
        self.poll_s = poll_s

    # submitting -----------------------------------------------------------------------------------
    def request(self, cfg: DictConfig) -> tuple[int, float | None]:
        """The job's time limit (minutes) and memory (GB, None: the cluster's default): the ones set,
        else the matching estimate's, else 60 minutes and the cluster's default."""
        from toolbox.results.estimated_request import request_for_config

        estimated = {} if self.time_min is not None and self.mem_gb is not None else request_for_config(cfg)
        time_min = self.time_min if self.time_min is not None else estimated.get("runtime", DEFAULT_TIME_MIN)
        mem_gb = self.mem_gb
        if mem_gb is None and "mem_mb" in estimated:
            mem_gb = estimated["mem_mb"] / 1024  # submitit writes --mem=<mem_gb x 1024>MB: the MB asked
        return time_min, mem_gb

    def parameters(self, cfg: DictConfig) -> dict[str, Any]:
        """What the submitit executor is given for ``cfg`` (the sbatch options)."""
        time_min, mem_gb = self.request(cfg)
        params: dict[str, Any] = {
            "name": self.job_name or str(cfg.get("run_name", "toolbox")),
            "timeout_min": time_min,
            "nodes": self.nodes,
            "tasks_per_node": self.nproc if self.mode == "tasks" else 1,
            "slurm_signal_delay_s": self.signal_delay_s,
        }
        optional = {
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": mem_gb,
            "gpus_per_node": self.gpus_per_node or None,
            "slurm_partition": self.partition,
            "slurm_account": self.account,
            "slurm_qos": self.qos,
            "slurm_constraint": self.constraint,
            "slurm_setup": self.setup or None,
            "slurm_additional_parameters": self.additional or None,
        }
        params.update({k: v for k, v in optional.items() if v is not None})
        if self.cluster != "slurm":  # the local executor knows none of the slurm_ options
            params = {k: v for k, v in params.items() if not k.startswith("slurm_") and k != "nodes"}
        return params

    def executor(self, cfg: DictConfig):
        params = self.parameters(cfg)  # before submitit: a bad request fails before a folder is made
        try:
            import submitit
        except ImportError:
            raise ConfigError("launcher=slurm needs submitit: pip install 'toolbox[launch]'.") from None
        try:
            executor = submitit.AutoExecutor(
                folder=str(Path(cfg.run_dir) / self.folder),
                cluster=self.cluster,
                slurm_max_num_timeout=self.max_requeues,
            )
        except RuntimeError as e:  # submitit: 'Could not detect "srun", are you indeed on a slurm cluster?'
            if "srun" not in str(e):
                raise
            from toolbox.launch import LaunchError

            raise LaunchError(
                f"launcher=slurm: no SLURM client here (srun and sbatch not found). {NO_CLUSTER_HINT}"
            ) from None
        executor.update_parameters(**params)
        return executor

    def job(self, cfg: DictConfig, name: str = "config.yaml") -> SlurmTrainJob:
        check_output_dir(cfg.run_dir)  # before the job is queued: it would fail only once it starts
        path = write_launch_config(cfg, name)
        return SlurmTrainJob(
            str(path.resolve()), os.getcwd(), self.mode, self.nproc, False, self.omp_num_threads
        )

    def submit(self, cfg: DictConfig):
        """Submit one run; returns the submitit job (``job.job_id``, ``job.paths.stdout``)."""
        job = self.job(cfg)  # checks the run folder first: the executor creates its log folder there
        executor = self.executor(cfg)
        with sbatch_errors():
            return executor.submit(job)

    def submit_sweep(self, cfgs: list[DictConfig]) -> list:
        """Submit several runs as one job array (submitit's batch); returns their jobs."""
        if not cfgs:
            return []
        for cfg in cfgs:  # every run folder, before anything is written or queued
            check_output_dir(cfg.run_dir)
        jobs_in = [self.job(c) for c in cfgs]
        executor = self.executor(cfgs[0])
        with sbatch_errors(), executor.batch():
            jobs = [executor.submit(j) for j in jobs_in]
        return jobs

    # waiting --------------------------------------------------------------------------------------
    def wait(self, job, stream: bool = True, out: IO[str] | None = None, err: IO[str] | None = None) -> dict:
        """Wait for ``job``, printing its log as it grows; its result, or ``LaunchError``."""
        out, err = out or sys.stdout, err or sys.stderr
        offsets: dict[Path, int] = {}
        # a requeued job (preempted, timed out) can read as done (FAILED) in sacct for a moment
        # while SLURM already lists it again as pending: done only once the queue no longer has it
        while not job.done() or (self.cluster == "slurm" and _queued(job)):
            if stream:
                _follow(job, out, err, offsets)
            time.sleep(self.poll_s)
        if stream:
            _follow(job, out, err, offsets)
        try:
            return job.results()[0]  # task 0 holds rank 0's result (mode=tasks has one task per rank)
        except Exception as e:  # FailedJobException, UncompletedJobError
            state = _state(job)
            raise LaunchError(
                f"SLURM job {job.job_id} ended {state or 'without a result'}: {str(e).strip()[-2000:]}\n"
                f"log: {job.paths.stdout} and {job.paths.stderr}",
                exit_code=_exit_code(job),
            ) from None

    def launch(self, cfg: DictConfig) -> dict[str, float]:
        return self.run(cfg)["metrics"]

    def run(self, cfg: DictConfig, stream: bool = True) -> dict[str, Any]:
        job = self.submit(cfg)
        print(f"submitted SLURM job {job.job_id}; log {job.paths.stdout}", file=sys.stderr, flush=True)
        return self.wait(job, stream=stream)


NO_CLUSTER_HINT = (
    "Is a SLURM cluster reachable from here (`sinfo`)? Without one: launcher=local, or "
    "launcher.cluster=local to run the same job through submitit on this machine."
)


@contextlib.contextmanager
def sbatch_errors():
    """A refused submission (no cluster, no controller, a bad request) as one ``LaunchError`` line
    with sbatch's own last word, instead of submitit's traceback and sbatch's stderr."""
    from submitit.core.utils import FailedJobError

    from toolbox.launch import LaunchError

    captured = io.StringIO()  # submitit prints sbatch's stderr before raising
    try:
        with contextlib.redirect_stderr(captured):
            yield
    except FailedJobError as e:
        lines = [line.strip() for line in (str(e) or captured.getvalue()).splitlines() if line.strip()]
        said = lines[-1] if lines else "no message"
        raise LaunchError(f"launcher=slurm: sbatch refused the job ({said}). {NO_CLUSTER_HINT}") from None
    except FileNotFoundError as e:
        if "sbatch" not in str(e):
            raise
        raise LaunchError(f"launcher=slurm: sbatch is not installed here. {NO_CLUSTER_HINT}") from None
    finally:
        sys.stderr.write(
            "".join(line for line in captured.getvalue().splitlines(True) if "sbatch" not in line)
        )


def _follow(job, out: IO[str], err: IO[str], offsets: dict[Path, int]) -> None:
    for path, stream in ((job.paths.stdout, out), (job.paths.stderr, err)):
        try:
            with open(path, "rb") as f:
                f.seek(offsets.get(path, 0))
                data = f.read()
        except OSError:
            continue
        if data:
            offsets[path] = offsets.get(path, 0) + len(data)
            stream.write(data.decode(errors="replace"))
            stream.flush()


def _queued(job) -> bool:
    """Whether ``squeue`` still lists the job (pending, running, requeued, completing)."""
    import subprocess

    try:
        res = subprocess.run(
            ["squeue", "-h", "-j", str(job.job_id), "-o", "%T"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and bool(res.stdout.strip())


def _state(job) -> str:
    try:
        return str(job.state)
    except Exception:
        return ""


def _exit_code(job) -> int:
    """The job's exit status from sacct (``ExitCode`` is ``status:signal``), else 1."""
    import subprocess

    try:
        res = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", str(job.job_id), "-o", "ExitCode"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        code, _, sig = res.stdout.strip().splitlines()[0].partition(":")
        return int(code) or (128 + int(sig) if sig and int(sig) else 1)
    except Exception:
        return 1
