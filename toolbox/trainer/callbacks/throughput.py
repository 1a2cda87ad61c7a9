"""Throughput: tokens and steps per second, added to each step's metrics for the loggers."""

from __future__ import annotations

import time
from collections import deque

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


@CALLBACKS.register("throughput")
class Throughput(Callback):
    """Add ``tokens_per_s`` and ``steps_per_s`` to every STEP_END's metrics, in place.

    A step's time is the wall time since the previous step ended (so data loading and the other
    callbacks count), except when an eval or a checkpoint came in between: then it is measured
    from the step's own start, so that evaluation is not counted as training time. The figures
    are averaged over the last ``window`` steps. ``tokens_per_s`` needs the trainer's
    ``num_tokens`` metric and counts this process's tokens only (multiply by the world size for
    the whole job). Runs before the loggers (priority -10) and on every rank.

    Args:
        window: number of recent steps the rates are averaged over.
    """

    priority = -10
    main_process_only = False

    def __init__(self, window: int = 20) -> None:
        if window < 1:
            raise ValueError(f"throughput.window must be >= 1, got {window}")
        self.window = window
        self._reset()

    def _reset(self) -> None:
        self._last_end: float | None = None
        self._step_start: float | None = None
        self._interrupted = False
        self._recent: deque[tuple[float, float | None]] = deque(maxlen=self.window)  # (s, tokens)

    def on_fit_start(self, data: EventData) -> None:
        self._reset()

    def on_step_start(self, data: EventData) -> None:
        self._step_start = time.perf_counter()

    def on_eval_end(self, data: EventData) -> None:
        self._interrupted = True

    def on_checkpoint_saved(self, data: EventData) -> None:
        self._interrupted = True

    def on_step_end(self, data: EventData) -> None:
        now = time.perf_counter()
        if self._last_end is None or self._interrupted:
            since = self._step_start
        else:
            since = self._last_end
        self._last_end = now
        self._interrupted = False
        if since is None:  # no STEP_START seen yet: nothing to measure against
            return
        tokens = data.metrics.get("num_tokens")
        self._recent.append((max(now - since, 1e-9), None if tokens is None else float(tokens)))
        data.metrics["steps_per_s"] = len(self._recent) / sum(t for t, _ in self._recent)
        counted = [(t, n) for t, n in self._recent if n is not None]
        if counted:
            data.metrics["tokens_per_s"] = sum(n for _, n in counted) / sum(t for t, _ in counted)
