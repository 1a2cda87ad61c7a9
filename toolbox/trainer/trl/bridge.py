"""The TRL backends' bridge: TRL's step and log calls become our events.

TRL's trainers run their own loop; this ``TrainerCallback`` re-emits STEP_START / STEP_END (with
TRL's logged numbers as metrics) and runs our evaluators every ``eval_every`` steps, so the same
callbacks (console, JSONL, W&B, checkpoint export) observe a TRL run as they observe ours.
"""

from __future__ import annotations

import time
from typing import Any

from toolbox.core.errors import ConfigError
from toolbox.core.events import Event


def event_bridge(trainer: Any, aliases: dict[str, str] | None = None) -> Any:
    """A transformers ``TrainerCallback`` forwarding to ``trainer.bus``.

    ``aliases`` copies TRL metric names to ours (``{"rewards/accuracies": "accuracy"}``).
    """
    from transformers import TrainerCallback

    aliases = aliases or {}
    trainer._last_log = time.perf_counter()

    class Bridge(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            trainer.bus.emit(Event.STEP_START, trainer, state.global_step + 1)

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "train_runtime" in logs:
                return
            trainer.step = state.global_step
            metrics = {k: float(v) for k, v in logs.items() if isinstance(v, int | float)}
            for source, target in aliases.items():
                metrics[target] = metrics.get(source, 0.0)
            now = time.perf_counter()
            metrics["step_time"] = now - trainer._last_log
            trainer._last_log = now
            trainer.bus.emit(Event.STEP_END, trainer, state.global_step, metrics)
            if (
                trainer.eval_every
                and state.global_step % trainer.eval_every == 0
                and state.global_step < trainer.max_steps
            ):
                trainer._evaluate()

    return Bridge()


def refuse_resume(parts: Any, name: str, native: str) -> None:
    """TRL's loop keeps no state we could resume: a run asking to resume fails before it starts."""
    if parts.cfg.get("resume_from"):
        raise ConfigError(f"resume_from: trainer={name} cannot resume; use trainer={native} to resume runs.")


def run_trl_loop(trainer: Any) -> None:
    """The ``run_loop`` of a TRL backend: TRL's own trainer trains; the bridge emits our events."""
    trl_trainer = trainer._trl_trainer()
    trainer._last_log = time.perf_counter()
    trl_trainer.train()
    trainer.step = int(trl_trainer.state.global_step)
