"""Callback: an observer of the trainer's events.

Subclasses override any of ``on_fit_start``, ``on_step_start``, ``on_step_end``, ``on_eval_end``,
``on_checkpoint_saved``, ``on_export``, ``on_fit_end``; ``attach`` subscribes exactly the overridden ones.
``priority`` orders handlers of one event (lower runs first): producers of metrics (throughput,
memory) run before the loggers that read them.

What a handler can rely on (``data: EventData``): ``data.trainer.step``, ``.max_steps``,
``.context`` (``run_dir``, ``is_main``, ``rank``), ``.model``, ``.tokenizer``, ``.cfg`` (the composed
config), ``.request_stop(reason)``; ``data.metrics`` (STEP_END: loss, lr, grad_norm, num_tokens,
step_time; EVAL_END: ``eval/...``), ``data.payload`` (CHECKPOINT_SAVED: ``path``; FIT_START:
``resumed_from``; EXPORT: ``resumed`` (True when a finished run was resumed: nothing trained, and
the final model is written only if it is missing); FIT_END: ``stopped_early``; ROLLOUT_END, from RL trainers: ``rollout``, the
round's scored ``TextRollout``).
"""

from __future__ import annotations

from toolbox.core.events import Event, EventBus, EventData

_METHODS = {
    Event.FIT_START: "on_fit_start",
    Event.STEP_START: "on_step_start",
    Event.STEP_END: "on_step_end",
    Event.EVAL_END: "on_eval_end",
    Event.CHECKPOINT_SAVED: "on_checkpoint_saved",
    Event.EXPORT: "on_export",
    Event.FIT_END: "on_fit_end",
    Event.ROLLOUT_END: "on_rollout_end",
}


class Callback:
    priority: int = 0
    main_process_only: bool = True  # loggers and writers run on rank 0 only

    def attach(self, bus: EventBus) -> None:
        for event, method in _METHODS.items():
            if getattr(type(self), method) is not getattr(Callback, method):
                bus.subscribe(event, getattr(self, method), self.priority)

    def on_fit_start(self, data: EventData) -> None:
        pass

    def on_step_start(self, data: EventData) -> None:
        pass

    def on_step_end(self, data: EventData) -> None:
        pass

    def on_eval_end(self, data: EventData) -> None:
        pass

    def on_checkpoint_saved(self, data: EventData) -> None:
        pass

    def on_export(self, data: EventData) -> None:
        pass

    def on_fit_end(self, data: EventData) -> None:
        pass

    def on_rollout_end(self, data: EventData) -> None:
        pass
