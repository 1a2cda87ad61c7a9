"""Events: the trainer emits them, callbacks observe them (the observer pattern).

The training loop never logs or saves on its own; it calls ``bus.emit(Event.STEP_END, ...)`` and the
subscribed callbacks decide what to do. Handlers run in ascending ``priority`` so that, for example,
the throughput callback adds ``tokens_per_s`` to a step's metrics before the loggers read them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Event(enum.Enum):
    FIT_START = "fit_start"
    STEP_START = "step_start"
    STEP_END = "step_end"
    EVAL_END = "eval_end"
    CHECKPOINT_SAVED = "checkpoint_saved"
    EXPORT = "export"  # write the final model: before FIT_END, and alone when a finished run is resumed
    FIT_END = "fit_end"
    ROLLOUT_END = "rollout_end"  # RL trainers: a round's rollout, scored (payload: rollout)


@dataclass
class EventData:
    """What a handler receives: the trainer (for state), the step, and event-specific payload."""

    event: Event
    trainer: Any
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[EventData], None]


class EventBus:
    def __init__(self) -> None:
        self._handlers: dict[Event, list[tuple[int, int, Handler]]] = {e: [] for e in Event}
        self._count = 0

    def subscribe(self, event: Event, handler: Handler, priority: int = 0) -> None:
        self._count += 1
        self._handlers[event].append((priority, self._count, handler))
        self._handlers[event].sort(key=lambda t: (t[0], t[1]))

    def emit(
        self, event: Event, trainer: Any, step: int, metrics: dict | None = None, **payload: Any
    ) -> EventData:
        data = EventData(event, trainer, step, metrics if metrics is not None else {}, payload)
        for _, _, handler in self._handlers[event]:
            handler(data)
        return data
