"""Profiler: torch.profiler over a short window of training steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


@CALLBACKS.register("profiler")
class Profiler(Callback):
    """Profile ``num_steps`` training steps from ``start_step`` with torch.profiler.

    Profiling starts at the STEP_START of ``start_step`` and stops after the STEP_END of the
    ``num_steps``-th step. It records CPU activity, and CUDA activity when CUDA is available;
    each step is marked as ``train_step_<N>`` in the trace. It writes a chrome trace
    ``run_dir/profiler/trace_step<start_step>.json`` (open it in https://ui.perfetto.dev or
    chrome://tracing) and the operator table ``run_dir/profiler/key_averages_step<start_step>.txt``.

    Args:
        start_step: the first profiled step; skip a few so warm-up does not dominate.
        num_steps: how many steps to profile.
        record_shapes: record operator input shapes (the table then groups by shape).
        row_limit: rows of the operator table.
    """

    def __init__(
        self, start_step: int = 5, num_steps: int = 3, record_shapes: bool = False, row_limit: int = 30
    ) -> None:
        if num_steps < 1:
            raise ValueError(f"profiler.num_steps must be >= 1, got {num_steps}")
        self.start_step = start_step
        self.num_steps = num_steps
        self.record_shapes = record_shapes
        self.row_limit = row_limit
        self.trace_path: Path | None = None
        self.table_path: Path | None = None
        self._prof: Any = None
        self._cuda = False
        self._run_dir = Path(".")
        self._mark: Any = None
        self._profiled = 0
        self._done = False

    def on_step_start(self, data: EventData) -> None:
        if self._prof is None and not self._done and data.step == self.start_step:
            import torch
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            self._cuda = len(activities) > 1
            self._run_dir = Path(data.trainer.context.run_dir)
            self._prof = profile(activities=activities, record_shapes=self.record_shapes)
            self._prof.start()
        if self._prof is not None:
            from torch.profiler import record_function

            self._mark = record_function(f"train_step_{data.step}")
            self._mark.__enter__()

    def on_step_end(self, data: EventData) -> None:
        if self._prof is None:
            return
        self._end_mark()
        self._profiled += 1
        if self._profiled >= self.num_steps:
            self._finish()

    def on_fit_end(self, data: EventData) -> None:
        if self._prof is not None:  # the run ended inside the window: write what was recorded
            self._finish()

    def _end_mark(self) -> None:
        if self._mark is not None:
            self._mark.__exit__(None, None, None)
            self._mark = None

    def _finish(self) -> None:
        self._end_mark()
        prof, self._prof, self._done = self._prof, None, True
        prof.stop()
        out = self._run_dir / "profiler"
        out.mkdir(parents=True, exist_ok=True)
        self.trace_path = out / f"trace_step{self.start_step}.json"
        prof.export_chrome_trace(str(self.trace_path))
        sort_by = "self_device_time_total" if self._cuda else "self_cpu_time_total"
        table = prof.key_averages(group_by_input_shape=self.record_shapes).table(
            sort_by=sort_by, row_limit=self.row_limit
        )
        self.table_path = out / f"key_averages_step{self.start_step}.txt"
        self.table_path.write_text(
            f"torch.profiler: {self._profiled} steps from step {self.start_step}, sorted by {sort_by}\n\n"
            f"{table}\n",
            encoding="utf-8",
        )
