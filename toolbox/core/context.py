"""The run context: where a run writes, its seed, its device, its rank and world size.

One ``RunContext`` exists per process (``RunContext.current()``); the builder creates it from the
config and the distributed environment (``RANK``/``WORLD_SIZE`` as torchrun and SLURM set them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar


@dataclass
class RunContext:
    run_dir: Path
    seed: int = 0
    device: str = "cpu"
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    extra: dict = field(default_factory=dict)

    _current: ClassVar[RunContext | None] = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, run_dir: str | Path, seed: int = 0, device: str = "auto") -> RunContext:
        from toolbox.core.device import resolve_device

        rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))
        world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
        local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", 0)))
        ctx = cls(Path(run_dir), seed, resolve_device(device, local), rank, local, world)
        cls.set_current(ctx)
        return ctx

    @classmethod
    def current(cls) -> RunContext:
        if cls._current is None:
            raise RuntimeError("no RunContext: build an experiment first (ExperimentBuilder.build)")
        return cls._current

    @classmethod
    def set_current(cls, ctx: RunContext | None) -> None:
        cls._current = ctx
