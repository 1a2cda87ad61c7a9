"""Early stopping: ask the trainer to stop when an eval metric stops improving."""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


@CALLBACKS.register("early_stopping")
class EarlyStopping(Callback):
    """Stop training after ``patience`` evaluations in a row without improvement, or as soon as the
    metric reaches ``stopping_threshold`` (Lightning's option of that name).

    An evaluation improves when the metric beats the best value so far by more than
    ``min_delta`` (lower for ``mode=min``, higher for ``mode=max``); a NaN never improves. The
    best value and the count of bad evaluations are saved in checkpoints (``state_dict``), so a
    resumed run keeps counting. Runs on every rank, so that every rank reaches the same decision
    from the same (reduced) eval metrics.

    Args:
        monitor: the EVAL_END metric to watch, for example eval/loss or eval/accuracy.
        mode: min when lower is better, max when higher is better.
        patience: how many evaluations in a row without improvement stop the run.
        min_delta: the smallest change that counts as an improvement.
        stopping_threshold: stop once the metric is at least this (``mode=max``) or at most this
            (``mode=min``): train "until 80 % exact match" (null: no threshold).
    """

    main_process_only = False

    def __init__(
        self,
        monitor: str = "eval/loss",
        mode: Literal["min", "max"] = "min",
        patience: int = 3,
        min_delta: float = 0.0,
        stopping_threshold: float | None = None,
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"early_stopping.mode must be 'min' or 'max', got {mode!r}")
        if patience < 1:
            raise ValueError(f"early_stopping.patience must be >= 1, got {patience}")
        if min_delta < 0:
            raise ValueError(f"early_stopping.min_delta must be >= 0, got {min_delta}")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = min_delta
        self.stopping_threshold = stopping_threshold
        self.best: float | None = None
        self.best_step: int | None = None
        self.bad_count = 0
        self.stopped = False
        self._warned = False

    def improved(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def _reached(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.mode == "min":
            return value <= self.stopping_threshold
        return value >= self.stopping_threshold

    def on_eval_end(self, data: EventData) -> None:
        if self.monitor not in data.metrics:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"early_stopping: metric '{self.monitor}' is not among the eval metrics "
                    f"({', '.join(sorted(data.metrics)) or 'none'}); set callbacks.early_stopping"
                    ".monitor to one of them. Early stopping is inactive.",
                    stacklevel=2,
                )
            return
        value = float(data.metrics[self.monitor])
        if self.stopping_threshold is not None and not self.stopped and self._reached(value):
            self.stopped = True
            data.trainer.request_stop(
                f"early stopping: {self.monitor} reached {value:.6g} at step {data.step} "
                f"(stopping_threshold {self.stopping_threshold:g})"
            )
        if self.improved(value):
            self.best, self.best_step, self.bad_count = value, data.step, 0
            return
        self.bad_count += 1
        if self.bad_count >= self.patience and not self.stopped:
            self.stopped = True
            best = "none" if self.best is None else f"{self.best:.6g} at step {self.best_step}"
            data.trainer.request_stop(
                f"early stopping: {self.monitor} did not improve for {self.bad_count} evaluations "
                f"(best {best}, last {value:.6g} at step {data.step})"
            )

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_step": self.best_step,
            "bad_count": self.bad_count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state.get("best")
        self.best_step = state.get("best_step")
        self.bad_count = int(state.get("bad_count", 0))
        self.stopped = False  # a resumed run (say, with more steps) may stop again


def until_overrides(monitor: str, threshold: float, every: int = 25, mode: str = "max") -> list[str]:
    """Overrides that evaluate every ``every`` steps and stop the run once ``monitor`` reaches
    ``threshold`` (a warm start "until held-out token accuracy 0.88"); patience 1000 evaluations, more
    than such a run makes, so it ends at the threshold or at ``trainer.max_steps``."""
    return [
        f"trainer.eval_every={every}",
        f"+callbacks.early_stopping={{name: early_stopping, monitor: {monitor}, mode: {mode}, "
        f"patience: 1000, stopping_threshold: {threshold}}}",
    ]
