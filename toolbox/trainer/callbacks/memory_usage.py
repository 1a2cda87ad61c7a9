"""Memory monitor: the process's resident memory and the CUDA peak, added to step metrics."""

from __future__ import annotations

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback

_MB = 1024 * 1024


@CALLBACKS.register("memory")
class MemoryMonitor(Callback):
    """Add ``memory/rss_mb`` and, once CUDA is in use, ``memory/cuda_peak_mb`` to step metrics.

    ``memory/cuda_peak_mb`` is ``torch.cuda.max_memory_allocated`` of the current device (the
    peak since the start of the process). Runs before the loggers (priority -10).

    Args:
        every: record every this many steps (and at the first step seen).
    """

    priority = -10

    def __init__(self, every: int = 10) -> None:
        if every < 1:
            raise ValueError(f"memory.every must be >= 1, got {every}")
        self.every = every
        self._process = None
        self._seen_first = False

    def on_fit_start(self, data: EventData) -> None:
        self._seen_first = False

    def on_step_end(self, data: EventData) -> None:
        if self._seen_first and data.step % self.every != 0:
            return
        self._seen_first = True
        data.metrics.update(self.measure())

    def measure(self) -> dict[str, float]:
        import psutil

        if self._process is None:
            self._process = psutil.Process()
        out = {"memory/rss_mb": self._process.memory_info().rss / _MB}
        import torch

        # is_initialized: a CPU run on a GPU machine should not create a CUDA context for this
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["memory/cuda_peak_mb"] = torch.cuda.max_memory_allocated() / _MB
        return out
