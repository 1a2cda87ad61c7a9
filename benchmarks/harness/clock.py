"""Per-step wall and CPU time, after a warm-up, from inside a trainer's own loop (a callback)."""

from __future__ import annotations

import time


class StepClock:
    """Call ``step_done()`` at the end of every optimizer step; the first ``warmup`` steps do not count."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.steps = 0
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._last: tuple[float, float] | None = None

    def start(self) -> None:
        """Mark the start of the first step (for a loop whose first step should count its set-up)."""
        self._last = (time.perf_counter(), time.process_time())

    def step_done(self) -> None:
        now = (time.perf_counter(), time.process_time())
        self.steps += 1
        if self._last is not None and self.steps > self.warmup:
            self.wall.append(now[0] - self._last[0])
            self.cpu.append(now[1] - self._last[1])
        self._last = now

    @property
    def timed_steps(self) -> int:
        return len(self.wall)

    def figures(self, per_step: dict[str, float] | None = None) -> dict[str, float]:
        """Seconds per step (mean over the timed steps, wall and CPU), steps/s, and each of
        ``per_step`` (work per step, e.g. tokens) as a rate per wall second and per CPU second."""
        if not self.wall:
            raise RuntimeError(
                f"no timed steps: the run made {self.steps} steps, all warm-up; raise --steps above --warmup."
            )
        wall = sum(self.wall) / len(self.wall)
        cpu = sum(self.cpu) / len(self.cpu)
        out = {"sec_per_step": wall, "cpu_sec_per_step": cpu, "steps_per_s": 1.0 / wall}
        for name, amount in (per_step or {}).items():
            out[f"{name}_per_s"] = amount / wall
            out[f"{name}_per_cpu_s"] = amount / cpu
        return out
