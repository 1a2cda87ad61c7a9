"""DistributedDataParallel: every rank holds the whole model; gradients are averaged over ranks.

Start it with ``toolbox launch launcher=torchrun strategy=ddp launcher.nproc=2`` (or inside SLURM).
Each rank draws its own share of every global batch (``BatchLoader`` takes every ``world_size``-th
example), so ``trainer.batch_size`` is per process and the global batch is ``batch_size × world_size``.
Checkpoints hold the unwrapped model's state, the same files a single-process run writes, so a run
saved under DDP resumes under ``single`` (and the reverse) when the global batch is kept.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from toolbox.core.context import RunContext
from toolbox.core.registries import STRATEGIES
from toolbox.distributed.process_group import DistributedStrategy


@STRATEGIES.register("ddp")
class DDP(DistributedStrategy):
    """Data parallel over the processes of a torchrun / SLURM launch (gloo on CPU, nccl on GPU).

    Args:
        backend: auto (nccl on CUDA, gloo on CPU), gloo or nccl.
        timeout_s: seconds a collective may wait for the other ranks before failing.
        find_unused_parameters: let DDP tolerate parameters that get no gradient in a step.
        bucket_cap_mb: size of the gradient all-reduce buckets.
        gradient_as_bucket_view: gradients alias the communication buckets (saves memory).
        static_graph: the set of used parameters never changes between steps (a speed hint).
    """

    def __init__(
        self,
        context: RunContext,
        backend: str = "auto",
        timeout_s: float = 1800.0,
        find_unused_parameters: bool = False,
        bucket_cap_mb: float = 25.0,
        gradient_as_bucket_view: bool = True,
        static_graph: bool = False,
    ) -> None:
        super().__init__(context, backend=backend, timeout_s=timeout_s)
        self.find_unused_parameters = find_unused_parameters
        self.bucket_cap_mb = bucket_cap_mb
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        model = model.to(self.device)
        return DistributedDataParallel(
            model,
            device_ids=[self.device] if self.device.type == "cuda" else None,
            find_unused_parameters=self.find_unused_parameters,
            bucket_cap_mb=self.bucket_cap_mb,
            gradient_as_bucket_view=self.gradient_as_bucket_view,
            static_graph=self.static_graph,
        )
