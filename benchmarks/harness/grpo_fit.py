"""A GRPO run timed step by step: our ``grpo`` trainer (and its subclasses) or ``trl_grpo`` (TRL's
loop), with the clock started when training starts (after the engine, producer or TRL trainer is
built) and each rollout's generation seconds (ours: the ``rollout_time`` metric; TRL: its
generation method, timed around the call)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TimedFit:
    """Per-step wall and CPU seconds, generation seconds and STEP_END metrics after the warm-up."""

    wall: list[float]
    cpu: list[float]
    generate: list[float]
    metrics: list[dict[str, float]] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        """Median seconds per step (wall and CPU), steps/s and the mean generation seconds a step."""
        median = statistics.median(self.wall)
        return {
            "sec_per_step": median,
            "steps_per_s": 1.0 / median,
            "sec_per_step_mean": sum(self.wall) / len(self.wall),
            "cpu_sec_per_step": statistics.median(self.cpu),
            "rollout_sec_per_step": sum(self.generate) / max(len(self.generate), 1),
            "measured_steps": len(self.wall),
        }


def timed_fit(
    trainer: Any,
    warmup: int,
    trl_generate: str = "_generate_single_turn",
    on_trl_generate: Callable[[tuple, Any], None] | None = None,
) -> TimedFit:
    """``trainer.fit()``, timing each step; the first ``warmup`` steps are dropped.

    ``trl_generate``: the TRL trainer's method that generates a step's completions (timed);
    ``on_trl_generate(args, output)``: called after each of its calls (e.g. to check its output).
    """
    from toolbox.core.events import Event

    stamps = [time.perf_counter()]
    cpu = [time.process_time()]
    generate: list[float] = []
    metrics: list[dict[str, float]] = []
    ours = not hasattr(trainer, "trl_config")

    def on_end(d: Any) -> None:
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        metrics.append(dict(d.metrics))
        if ours:
            generate.append(d.metrics["rollout_time"])

    def start() -> None:
        stamps[0], cpu[0] = time.perf_counter(), time.process_time()

    trainer.bus.subscribe(Event.STEP_END, on_end)
    if ours:
        setup = trainer.setup

        def started() -> None:
            setup()  # builds the engine and, async, starts the producer: its first rounds count
            start()  # in the first (warm-up) steps

        trainer.setup = started
    else:
        build = trainer._trl_trainer

        def timed_trainer() -> Any:
            trl = build()
            inner = getattr(trl, trl_generate)

            def timed(*args: Any, **kwargs: Any) -> Any:
                s = time.perf_counter()
                out = inner(*args, **kwargs)
                generate.append(time.perf_counter() - s)
                if on_trl_generate is not None:
                    on_trl_generate(args, out)
                return out

            setattr(trl, trl_generate, timed)
            start()
            return trl

        trainer._trl_trainer = timed_trainer
    trainer.fit()
    wall = [b - a for a, b in zip(stamps, stamps[1:], strict=False)][warmup:]
    cpus = [b - a for a, b in zip(cpu, cpu[1:], strict=False)][warmup:]
    if not wall:
        raise RuntimeError(f"no timed steps: the run made {len(stamps) - 1}, all warm-up; raise --steps.")
    return TimedFit(wall, cpus, generate[warmup:], metrics[warmup:])
