"""The process group every distributed strategy shares: start it from the launcher's environment.

torchrun (and ``submitit.helpers.TorchDistributedEnvironment`` inside SLURM) set ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. A distributed strategy used in
a plain process (``toolbox train strategy=ddp``) starts a group of one on a free loopback port, so
the same config runs with one process or many.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from toolbox.core.context import RunContext
from toolbox.core.errors import ConfigError
from toolbox.distributed.base import Strategy

BACKENDS = ("auto", "gloo", "nccl")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def resolve_backend(backend: str, device: torch.device) -> str:
    """``auto``: nccl for CUDA devices, gloo otherwise; a mismatch fails with the fix."""
    if backend not in BACKENDS:
        raise ConfigError(f"strategy.backend: unknown backend '{backend}'; use one of {', '.join(BACKENDS)}.")
    if backend == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise ConfigError("strategy.backend=nccl needs a CUDA device (device=auto or cuda); on CPU use gloo.")
    return backend


def init_process_group(
    backend: str, device: torch.device, rank: int, world_size: int, timeout_s: float
) -> bool:
    """Join (or start) the default process group; returns True when this call started it."""
    if dist.is_initialized():
        if dist.get_world_size() != world_size:
            raise RuntimeError(
                f"a process group of size {dist.get_world_size()} already exists, but WORLD_SIZE={world_size}"
            )
        return False
    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)}
    if world_size == 1 and "MASTER_ADDR" not in os.environ:  # a group of one in a plain process
        kwargs["init_method"] = f"tcp://127.0.0.1:{free_port()}"
    missing = [
        k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ and "init_method" not in kwargs
    ]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not set for a distributed run of {world_size} processes: start it with "
            "`toolbox launch launcher=torchrun ...` (or torchrun / srun with the torch environment)."
        )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(backend, rank=rank, world_size=world_size, **kwargs)
    return True


def destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` without a process group)."""
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


class DistributedStrategy(Strategy):
    """What DDP and FSDP share: the process group, reductions over ranks, barriers, teardown."""

    def __init__(self, context: RunContext, backend: str = "auto", timeout_s: float = 1800.0) -> None:
        super().__init__(context)
        self.backend = resolve_backend(backend, self.device)
        self.timeout_s = timeout_s
        self._owns_group = False

    def setup(self) -> None:
        ctx = self.context
        self._owns_group = init_process_group(
            self.backend, self.device, ctx.rank, ctx.world_size, self.timeout_s
        )

    def all_reduce_sum(self, value: float) -> float:
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t.item())

    def barrier(self) -> None:
        if not dist.is_initialized():
            return
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index or 0])
        else:
            dist.barrier()

    def all_gather_object(self, obj: Any) -> list[Any]:
        return all_gather_object(obj)

    def teardown(self) -> None:
        if self._owns_group:
            destroy_process_group()
            self._owns_group = False
