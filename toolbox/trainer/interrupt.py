"""Ctrl-C (SIGINT) and SIGTERM during training: finish the step, checkpoint it, then stop.

The native loop runs inside :class:`StopOnSignal`. The first signal only sets ``signal_name``;
the loop sees it after the step in progress, saves a checkpoint at that step and raises
``TrainingInterrupted`` (``resume_from=auto`` continues from it). A second signal stops at once
(``KeyboardInterrupt``), without a checkpoint. Handlers are installed only in the main thread
(Python delivers signals there) and the previous ones are restored on exit.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopOnSignal:
    """A context in which SIGINT/SIGTERM ask for a stop instead of raising mid-step."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.exit_code = 130
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is not None:  # the second signal: stop now
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum
        log.warning(
            "%s: stopping after this step to save a checkpoint (send it again to stop at once)",
            self.signal_name,
        )


def agree_on_stop(strategy: object, should_stop: bool, interrupted: bool) -> tuple[bool, bool]:
    """One all-reduce over the ranks: any rank's stop request stops every rank and any rank's
    signal interrupts every rank (a signal counts ``world_size + 1``, a stop request 1)."""
    weight = strategy.context.world_size + 1  # type: ignore[attr-defined]
    total = strategy.all_reduce_sum(float(should_stop) + weight * float(interrupted))  # type: ignore[attr-defined]
    return total % weight > 0, total >= weight
