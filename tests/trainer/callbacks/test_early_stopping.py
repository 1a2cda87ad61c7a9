import pytest

from toolbox.core.registries import CALLBACKS
from toolbox.trainer.callbacks.early_stopping import EarlyStopping


def evals(driver, values, key="eval/loss"):
    """One step and one eval per value; returns the eval index (1-based) at which a stop was asked."""
    for i, v in enumerate(values, 1):
        driver.step(loss=1.0)
        driver.eval(**{key: v})
        if driver.trainer.should_stop:
            return i
    return None


@pytest.mark.parametrize("patience", [1, 2, 3])
def test_stops_after_exactly_patience_bad_evals(trainer, drive, patience):
    d = drive(EarlyStopping(patience=patience))
    d.fit_start()
    # improves twice, then never again: the stop comes at bad eval number `patience`
    stopped_at = evals(d, [1.0, 0.5] + [0.6] * 5)
    assert stopped_at == 2 + patience
    assert len(trainer.stop_reasons) == 1
    assert "eval/loss" in trainer.stop_reasons[0] and "0.5" in trainer.stop_reasons[0]


def test_an_improvement_resets_the_count(trainer, drive):
    cb = EarlyStopping(patience=2)
    d = drive(cb)
    assert evals(d, [1.0, 1.1, 0.9, 1.0]) is None  # bad, improve, bad: never two in a row
    assert cb.bad_count == 1 and cb.best == 0.9


def test_max_mode_and_min_delta(trainer, drive):
    d = drive(EarlyStopping(monitor="eval/acc", mode="max", patience=2, min_delta=0.05))
    # 0.52 and 0.54 beat 0.5 by less than min_delta: bad, bad -> stop
    assert evals(d, [0.5, 0.52, 0.54], key="eval/acc") == 3


@pytest.mark.parametrize(
    ("mode", "values", "stop"), [("max", [0.1, 0.5, 0.8, 0.9], 3), ("min", [3.0, 2.0, 0.5], 3)]
)
def test_stopping_threshold_stops_as_soon_as_it_is_reached(trainer, drive, mode, values, stop):
    threshold = 0.8 if mode == "max" else 0.5
    d = drive(EarlyStopping(monitor="eval/m", mode=mode, patience=100, stopping_threshold=threshold))
    assert evals(d, values, key="eval/m") == stop
    assert trainer.stop_reasons == [
        f"early stopping: eval/m reached {values[stop - 1]:.6g} at step {stop} (stopping_threshold {threshold:g})"
    ]


def test_stopping_threshold_ignores_nan(trainer, drive):
    d = drive(EarlyStopping(monitor="eval/m", mode="max", patience=100, stopping_threshold=0.5))
    assert evals(d, [float("nan"), 0.4], key="eval/m") is None


def test_nan_is_never_an_improvement(trainer, drive):
    d = drive(EarlyStopping(patience=2))
    assert evals(d, [1.0, float("nan"), float("nan")]) == 3


def test_state_dict_round_trip_continues_counting(trainer, drive):
    cb = EarlyStopping(patience=3)
    d = drive(cb)
    evals(d, [1.0, 2.0, 2.0])  # best 1.0, two bad
    state = cb.state_dict()
    assert state["best"] == 1.0 and state["bad_count"] == 2

    resumed = EarlyStopping(patience=3)
    resumed.load_state_dict(state)
    assert evals(drive(resumed), [2.0]) == 1  # the third bad eval in a row, across the resume


def test_missing_metric_warns_once(trainer, drive):
    d = drive(EarlyStopping(monitor="eval/los"))
    with pytest.warns(UserWarning, match="eval/loss"):
        evals(d, [1.0, 2.0, 3.0, 4.0])
    assert not trainer.should_stop


def test_registered_with_validated_schema():
    cb = CALLBACKS.build({"name": "early_stopping", "patience": 2, "mode": "max"})
    assert isinstance(cb, EarlyStopping) and cb.patience == 2
    with pytest.raises(Exception, match="mode"):
        CALLBACKS.build({"name": "early_stopping", "mode": "up"})
