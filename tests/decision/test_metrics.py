"""Decision metrics against hand computations."""

from __future__ import annotations

import numpy as np

from toolbox.eval.decision import (
    accuracy,
    coverage_at_risk,
    decision_metrics,
    expected_calibration_error,
    flip_rate,
)


def test_ece_by_hand():
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.45, 0.55]])
    labels = [0, 1, 1, 0]
    # bins of width 0.5: conf 0.55 -> bin 1 ((0.5, 1.0]); all four in bin 1 with 2 bins
    assert (
        abs(expected_calibration_error(probs, labels, bins=2) - abs(0.5 - (0.9 + 0.8 + 0.7 + 0.55) / 4))
        < 1e-12
    )
    # 10 bins: (0.9: right), (0.8: wrong), (0.7: right), (0.55: wrong), one per bin
    want = (abs(1 - 0.9) + abs(0 - 0.8) + abs(1 - 0.7) + abs(0 - 0.55)) / 4
    assert abs(expected_calibration_error(probs, labels, bins=10) - want) < 1e-12
    assert accuracy(probs, labels) == 0.5


def test_coverage_and_flip():
    probs = np.array([[0.99, 0.01], [0.95, 0.05], [0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    labels = [0, 0, 1, 1, 1]
    # most confident first: right, right, wrong (1/3 > 5%) ... -> only the first two
    assert coverage_at_risk(probs, labels, 0.05) == 0.4
    assert coverage_at_risk(probs, labels, 0.34) == 0.8  # 1 error in the top 4 (conf .99 .95 .9 .8)
    assert coverage_at_risk(probs[2:3], labels[2:3], 0.05) == 0.0
    assert flip_rate(probs, probs[:, ::-1]) == 1.0
    m = decision_metrics(probs, probs, labels)
    assert m["flip_rate"] == 0.0 and set(m) == {"accuracy", "ece", "flip_rate", "coverage_at_5"}
