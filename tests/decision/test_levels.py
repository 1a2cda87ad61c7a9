"""L1 (temperature scaling) and L2 (closed-form heads): direct computations, and anyjev 0.2.0."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from toolbox.decision import DecisionReader, LevelError, Question
from toolbox.decision.backends.hf import HFDecisionBackend
from toolbox.decision.levels import TemperatureScaler, fit_head, solve_lda, solve_ridge

HERE = Path(__file__).parent
ANYJEV02_PYTHON = os.environ.get("ANYJEV02_PYTHON", "/tmp/anyjev02/bin/python")


def _nll(probs, labels, t):
    logits = np.log(probs) / t
    logits -= logits.max(axis=1, keepdims=True)
    lp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -lp[np.arange(len(labels)), labels].mean()


def test_temperature_minimises_nll():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 5)) * 3.0
    labels = np.array([rng.choice(5, p=np.exp(r / 2) / np.exp(r / 2).sum()) for r in logits])  # true T = 2
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    t = TemperatureScaler.fit(probs, labels).temperature
    grid = np.exp(np.linspace(-3, 3, 6001))
    best = grid[np.argmin([_nll(probs, labels, g) for g in grid])]
    assert abs(t - best) / best < 2e-3
    assert 1.5 < t < 2.7  # near the temperature the labels were drawn at


def test_ridge_and_lda_equal_their_primal_forms():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 6))
    y = np.arange(30) % 3
    w, b = solve_ridge(x, y, 3, lam=2.0)
    onehot = np.eye(3)[y]
    xc, yc = x - x.mean(0), onehot - onehot.mean(0)
    w_primal = np.linalg.solve(xc.T @ xc + 2.0 * np.eye(6), xc.T @ yc)
    np.testing.assert_allclose(w, w_primal, atol=1e-10)
    np.testing.assert_allclose(b, onehot.mean(0) - x.mean(0) @ w_primal, atol=1e-10)
    w, _ = solve_lda(x, y, 3, shrinkage=0.6)
    means = np.stack([x[y == c].mean(0) for c in range(3)])
    resid = x - means[y]
    tau = (resid**2).sum() / 29 / 6
    cov = 0.4 * resid.T @ resid / 29 + 0.6 * tau * np.eye(6)
    np.testing.assert_allclose(w, np.linalg.solve(cov, means.T), atol=1e-9)


def test_fit_head_separates_classes_and_refuses_few_labels():
    rng = np.random.default_rng(2)
    y = np.arange(60) % 3
    x = rng.normal(size=(60, 2, 8))
    x[:, 1, :3] += 4.0 * np.eye(3)[y]  # only the second layer carries the class
    head = fit_head(x, y, 3, "lda", layers=[4, 7])
    assert head.layer == 7 and head.cv["oof_acc"] > 0.9
    assert (head.probs(x[:, 1]).argmax(1) == y).mean() > 0.95
    with pytest.raises(ValueError, match=r"at least max\(8, 2K\)"):
        fit_head(x[:5], y[:5], 3)


def test_levels_require_their_fit(tiny_model):
    model, tok, _ = tiny_model
    reader = DecisionReader(HFDecisionBackend(model, tok))
    q = Question.choice("Which intent is this?", ["lost card", "balance", "transfer"])
    with pytest.raises(ValueError, match="fit_l1"):
        reader.decide(["x"], [q], level="L1")
    with pytest.raises(ValueError, match="fit_l2"):
        reader.decide(["x"], [q], level="L2")
    with pytest.raises(LevelError, match="level L0 is required"):
        reader.decide(["x"], [q], level="raw", require="L0")


@pytest.mark.slow
@pytest.mark.skipif(not Path(ANYJEV02_PYTHON).exists(), reason="anyjev 0.2.0 side environment not built")
def test_l1_l2_equal_anyjev_020(tiny_model):
    """anyjev 0.2.0 (python3 -m venv /tmp/anyjev02 && pip install torch==2.13.0 anyjev==0.2.0
    transformers==5.24.0) fits L1 and L2 on the same model and items: ours agree within 1e-4."""
    from levels_data import LABELS, OPTIONS, QUESTION, STATES

    model, tok, path = tiny_model
    env = {**os.environ, "PYTHONPATH": ""}
    run = subprocess.run(
        [ANYJEV02_PYTHON, str(HERE / "anyjev02_levels.py"), path, str(HERE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    ref = json.loads(run.stdout.strip().splitlines()[-1])
    reader = DecisionReader(HFDecisionBackend(model, tok), prior="batch")
    q = Question.choice(QUESTION, OPTIONS)
    scaler = reader.fit_l1(q, STATES, LABELS)
    assert abs(scaler.temperature - ref["temperature"]) < 1e-4
    assert 0.05 < scaler.temperature < 20.0  # inside the search range: a real optimum
    l1 = np.stack([d.probs for d in reader.decide_batch(STATES[:10], q, level="L1")])
    np.testing.assert_allclose(l1, np.array(ref["l1"]), atol=1e-4, rtol=0)
    head = reader.fit_l2(q, STATES, LABELS)
    assert (head.layer, f"head:{head.kind}") == (ref["layer"], ref["kind"])
    l2 = np.stack([d.probs for d in reader.decide_batch(STATES[:10], q, level="L2")])
    np.testing.assert_allclose(l2, np.array(ref["l2"]), atol=1e-4, rtol=0)
