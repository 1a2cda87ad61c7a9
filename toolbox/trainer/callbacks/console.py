"""Console: a live progress bar in a terminal, plain log lines everywhere else."""

from __future__ import annotations

import datetime
import math
import os
import time
from typing import Any

from omegaconf import OmegaConf

from toolbox.core.events import EventData
from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.base import Callback


def fmt(value: Any) -> str:
    """A metric for humans: four significant digits, thousands as k/M."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v) or math.isinf(v):
        return str(v)
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:.4g}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    return str(datetime.timedelta(seconds=round(seconds)))


PROGRESS_FD_ENV = "TOOLBOX_PROGRESS_FD"  # a file descriptor that also gets the plain lines
FIELDS = (  # (metric, label), in line order
    ("loss", "loss"),
    ("lr", "lr"),
    ("tokens_per_s", "tok/s"),
    ("async/staleness", "stale"),  # asynchronous GRPO: updates the batch's policy lags
    ("async/trainer_wait_s", "wait s"),
    ("is/clip_fraction", "is clip"),
)


@CALLBACKS.register("console")
class ConsoleCallback(Callback):
    """Show training progress: step, loss, learning rate, tokens/s and the time left.

    In a terminal this is a live rich progress bar; evaluation results print above it. When
    standard output is not a terminal (CI, Snakemake and SLURM logs) it prints one plain line
    every ``log_every`` steps instead. At the end it prints a summary with the run directory.

    Args:
        log_every: steps between two plain lines when output is not a terminal.
    """

    def __init__(self, log_every: int = 10) -> None:
        if log_every < 1:
            raise ValueError(f"console.log_every must be >= 1, got {log_every}")
        self.log_every = log_every
        self.console = None  # a rich Console; set before FIT_START to redirect the output
        self._progress = None
        self._task = None
        self._info_width: int | None = None
        fd = os.environ.get(PROGRESS_FD_ENV, "")
        self._progress_fd = int(fd) if fd.isdigit() else None
        self._prefix = ""
        self._start_step = 0
        self._t0 = time.perf_counter()
        self._last: dict[str, Any] = {}
        self._last_eval: dict[str, Any] = {}

    # helpers ------------------------------------------------------------------------------
    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)
        self._tell(text)

    def _tell(self, text: str) -> None:
        """Also write a plain line to the descriptor ``TOOLBOX_PROGRESS_FD`` names: the workflow's
        train rule sends its output to a log and keeps the terminal there, so that progress shows
        on the screen under ``snakemake`` (prefixed by the run's name: jobs run side by side)."""
        if self._progress_fd is None or self.console is None or self.console.is_terminal:
            return  # on a terminal the bar is already on the screen
        try:
            os.write(self._progress_fd, f"{self._prefix}{text}\n".encode())
        except OSError:  # not open in this process: say nothing more there
            self._progress_fd = None

    def _eta(self, step: int, max_steps: int) -> float | None:
        done = step - self._start_step
        if done <= 0:
            return None
        return (time.perf_counter() - self._t0) / done * max(max_steps - step, 0)

    def _fields(self, metrics: dict[str, Any], width: int | None = None) -> str:
        """loss, lr and tok/s; with ``width``, only those that fit in it (loss first)."""
        shown = {key: f"{label} {fmt(metrics[key])}" for key, label in FIELDS if key in metrics}
        if width is not None:
            for key in (
                "is/clip_fraction",
                "async/trainer_wait_s",
                "async/staleness",
                "lr",
                "tokens_per_s",
                "loss",
            ):
                # dropped first to last
                if len(" | ".join(shown.values())) <= width:
                    break
                shown.pop(key, None)
        return " | ".join(shown.values())

    def _bar_layout(self, max_steps: int) -> tuple[int, int]:
        """(bar width, room for the metrics) so that the whole line fits the terminal: at 80
        columns rich would otherwise cut the step count and the times ("1234/2…", "0:00:…")."""
        width = self.console.width
        bar = 40 if width >= 120 else 20 if width >= 90 else 10
        # train, the bar, 1234/2500, 0:01:02, eta, 0:03:04 and the spaces between the 7 columns
        fixed = len("train") + bar + 2 * len(str(max_steps)) + 1 + 7 + len("eta") + 7 + 6
        return bar, max(width - fixed - 1, 0)

    # events -------------------------------------------------------------------------------
    def _ensure_console(self) -> None:
        if self.console is None:
            from rich.console import Console

            self.console = Console()

    def _set_prefix(self, data: EventData) -> None:
        """``[run_name] ``: the lines of jobs that run side by side stay apart on one screen."""
        cfg = getattr(data.trainer, "cfg", None)
        name = OmegaConf.select(cfg, "run_name", default=None) if cfg is not None else None
        self._prefix = f"[{name}] " if name else f"[{data.trainer.context.run_dir}] "

    def on_export(self, data: EventData) -> None:
        if data.payload.get("resumed"):
            self._ensure_console()
            self._set_prefix(data)
            self._print(
                f"resumed from step {data.step}: the run in {data.trainer.context.run_dir} had finished, "
                "nothing to train (a missing final model is written again)"
            )

    def on_fit_start(self, data: EventData) -> None:
        self._ensure_console()
        self._set_prefix(data)
        resumed = data.payload.get("resumed_from")
        self._start_step = int(resumed) if resumed is not None else int(data.step)
        self._t0 = time.perf_counter()
        self._last, self._last_eval = {}, {}
        max_steps = data.trainer.max_steps
        if resumed is not None:
            self._print(f"resumed from step {resumed}")
        if not self.console.is_terminal:
            self._print(f"training for {max_steps} steps, run dir {data.trainer.context.run_dir}")
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        bar, self._info_width = self._bar_layout(max_steps)
        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(bar_width=bar),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self._task = self._progress.add_task("train", total=max_steps, completed=self._start_step, info="")
        self._progress.start()

    def on_step_end(self, data: EventData) -> None:
        self._last = dict(data.metrics)
        max_steps = data.trainer.max_steps
        if self._progress is not None:
            info = self._fields(data.metrics, self._info_width)
            self._progress.update(self._task, completed=data.step, info=info)
            return
        if self.console is None:
            return  # FIT_START not seen
        if data.step % self.log_every == 0 or data.step >= max_steps:
            fields = self._fields(data.metrics)
            line = f"step {data.step}/{max_steps}"
            if fields:
                line += f" | {fields}"
            self._print(f"{line} | eta {fmt_duration(self._eta(data.step, max_steps))}")

    def on_eval_end(self, data: EventData) -> None:
        if self.console is None:
            return
        self._last_eval = dict(data.metrics)
        metrics = " | ".join(f"{k} {fmt(v)}" for k, v in data.metrics.items())
        self._print(f"eval @ step {data.step}: {metrics or '(no metrics)'}")

    def on_fit_end(self, data: EventData) -> None:
        if self.console is None:
            return
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        elapsed = time.perf_counter() - self._t0
        stopped = data.payload.get("stopped_early")
        reason = data.payload.get("stop_reason") or (stopped if isinstance(stopped, str) else None)
        how = "stopped early" if stopped or reason else "finished"
        if reason:
            how += f" ({reason})"
        lines = [f"{how} at step {data.step}/{data.trainer.max_steps} in {fmt_duration(elapsed)}"]
        final = {"loss": self._last["loss"]} if "loss" in self._last else {}
        final.update(data.metrics or self._last_eval)  # FIT_END carries the last eval's metrics
        if final:
            lines.append("final: " + " | ".join(f"{k} {fmt(v)}" for k, v in final.items()))
        lines.append(f"run dir: {data.trainer.context.run_dir}")
        for line in lines:
            self._print(line)
