"""Model selection on validation: keep the weights of the best evaluation, export those."""

from __future__ import annotations

import math
from typing import Any, Literal

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


@CALLBACKS.register("best_model")
class BestModel(Callback):
    """Keeps a copy of the weights at the evaluation where ``monitor`` was best and puts them back
    into the model when training ends, so the exported ``model/`` (and ``toolbox eval`` of it) is
    the model chosen on validation: the test accuracy at the best validation epoch, as the GCN
    paper and PyG's examples report it.

    Every evaluation's metrics gain ``eval/best_step`` and ``eval/best_<name>`` for each metric
    ``eval/<name>`` at that step (``eval/best_test_accuracy``), which the loggers then record. The
    first of equal values wins. The kept weights are part of checkpoints, so a resumed run keeps them.

    Args:
        monitor: the eval metric that selects the model, e.g. ``eval/val_accuracy``.
        mode: ``max`` when higher is better, ``min`` when lower is.
    """

    priority = -5  # before the loggers read the metrics, before the checkpoint callback exports
    main_process_only = False  # every rank restores the same weights

    def __init__(self, monitor: str = "eval/val_accuracy", mode: Literal["min", "max"] = "max") -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"best_model.mode must be 'min' or 'max', got {mode!r}")
        self.monitor = monitor
        self.mode = mode
        self.best: float | None = None
        self.best_step: int | None = None
        self.values: dict[str, float] = {}
        self.weights: dict[str, Any] | None = None

    def _better(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def on_eval_end(self, data: EventData) -> None:
        if self.monitor not in data.metrics:
            raise KeyError(
                f"callbacks.best_model.monitor: '{self.monitor}' is not an eval metric; the evaluators "
                f"report: {', '.join(sorted(data.metrics))}."
            )
        value = float(data.metrics[self.monitor])
        if self._better(value):
            self.best, self.best_step = value, data.step
            self.values = {k: float(v) for k, v in data.metrics.items() if k.startswith("eval/")}
            model = data.trainer.strategy.unwrap(data.trainer.model)
            self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        data.metrics["eval/best_step"] = float(self.best_step)
        for key, v in self.values.items():
            if not key.startswith("eval/best_"):
                data.metrics[f"eval/best_{key[len('eval/') :]}"] = v

    def on_export(self, data: EventData) -> None:
        if self.weights is not None:
            data.trainer.strategy.unwrap(data.trainer.model).load_state_dict(self.weights)

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_step": self.best_step,
            "values": self.values,
            "weights": self.weights,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_step = state["best"], state["best_step"]
        self.values, self.weights = state["values"], state["weights"]
