"""A fake trainer and an event driver: the callbacks are tested against a real EventBus."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from toolbox.core.events import Event, EventBus


class FakeTrainer(SimpleNamespace):
    """What a callback may rely on: step, max_steps, context, cfg, request_stop."""

    def __init__(self, run_dir: Path, max_steps: int = 10, rank: int = 0) -> None:
        super().__init__(
            step=0,
            max_steps=max_steps,
            context=SimpleNamespace(run_dir=run_dir, is_main=rank == 0, rank=rank),
            cfg=OmegaConf.create(
                {"trainer": {"max_steps": max_steps}, "run": {"name": "${trainer.max_steps}"}}
            ),
            model=None,
            tokenizer=None,
            should_stop=False,
            stop_reasons=[],
        )

    def request_stop(self, reason: str = "") -> None:
        self.should_stop = True
        self.stop_reasons.append(reason)


class Driver:
    """Emits the events the trainer's loop emits, with the same step numbering."""

    def __init__(self, trainer: FakeTrainer, callbacks: list) -> None:
        self.trainer = trainer
        self.bus = EventBus()
        for cb in callbacks:
            cb.attach(self.bus)

    def fit_start(self, resumed_from: int | None = None) -> None:
        if resumed_from is not None:
            self.trainer.step = resumed_from
        self.bus.emit(Event.FIT_START, self.trainer, self.trainer.step, resumed_from=resumed_from)

    def step(self, work=None, **metrics: float) -> dict:
        """One step; ``work()`` runs where the trainer's train_step would."""
        self.bus.emit(Event.STEP_START, self.trainer, self.trainer.step + 1)
        if work is not None:
            work()
        self.trainer.step += 1
        return self.bus.emit(Event.STEP_END, self.trainer, self.trainer.step, dict(metrics)).metrics

    def eval(self, **metrics: float) -> dict:
        return self.bus.emit(Event.EVAL_END, self.trainer, self.trainer.step, dict(metrics)).metrics

    def checkpoint(self) -> None:
        self.bus.emit(Event.CHECKPOINT_SAVED, self.trainer, self.trainer.step, path=None)

    def fit_end(self, stopped_early: bool = False, stop_reason: str | None = None) -> None:
        self.bus.emit(
            Event.FIT_END,
            self.trainer,
            self.trainer.step,
            stopped_early=stopped_early,
            stop_reason=stop_reason,
        )


@pytest.fixture
def trainer(tmp_path: Path) -> FakeTrainer:
    return FakeTrainer(tmp_path / "run")


@pytest.fixture
def drive(trainer: FakeTrainer):
    return lambda *callbacks: Driver(trainer, list(callbacks))
