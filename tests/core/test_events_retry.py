import pytest

from toolbox.core.events import Event, EventBus
from toolbox.core.retry import retry


def test_handlers_run_in_priority_order_and_share_metrics():
    bus = EventBus()
    seen = []
    bus.subscribe(Event.STEP_END, lambda d: seen.append(("logger", dict(d.metrics))), priority=0)
    bus.subscribe(Event.STEP_END, lambda d: d.metrics.update(extra=1.0), priority=-10)
    data = bus.emit(Event.STEP_END, trainer=None, step=3, metrics={"loss": 2.0})
    assert seen == [("logger", {"loss": 2.0, "extra": 1.0})]
    assert data.step == 3


def test_retry_backs_off_then_succeeds():
    delays, calls = [], []

    @retry(attempts=4, base_delay=0.5, jitter=0.0, exceptions=(OSError,), sleep=delays.append)
    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("busy")
        return "ok"

    assert flaky() == "ok"
    assert delays == [0.5, 1.0]


def test_retry_gives_up_and_does_not_catch_other_errors():
    @retry(attempts=2, base_delay=0.0, exceptions=(OSError,), sleep=lambda s: None)
    def always():
        raise OSError("down")

    with pytest.raises(OSError, match="down"):
        always()

    @retry(attempts=5, exceptions=(OSError,), sleep=lambda s: None)
    def wrong():
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        wrong()
