"""The labelled levels: L1 (temperature scaling) and L2 (a closed-form linear head on a hidden state).

Both need labelled items of one question (a few hundred in practice) and are fitted in seconds on a
CPU, with no gradient step on the model. They follow ``anyjev`` 0.2.0 (``calibrate/posthoc.py``,
``heads.py``), which had them (0.3.0 dropped them); ``tests/decision/test_levels.py`` checks ours
against it where that version installs, and against direct computations.

L1 (Guo et al. 2017): the L0 distribution's log-probabilities divided by one temperature T, found by
golden-section search on log T minimising the negative log-likelihood of the labels. The label
prior the calibration items were read with is frozen with it.

L2: the label logits of the raw readout are a linear head (the label rows of the LM head) on the
last hidden state. L2 fits another linear map, for one question, on the hidden state of a chosen
block: shrunk LDA (Fisher's discriminant, within-class covariance shrunk towards a multiple of the
identity, solved through the Woodbury identity) or ridge regression onto one-hot labels (solved in
the dual). The block, the solver's hyper-parameter and a temperature are chosen by k-fold
out-of-fold NLL, then the head is refitted on every item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

EPS = 1e-12
GRIDS: dict[str, list[dict[str, float]]] = {
    "lda": [{"shrinkage": a} for a in (0.3, 0.6, 0.9)],
    "ridge": [{"lam": lam} for lam in (1e-1, 1.0, 10.0, 100.0)],
}
DEPTHS = (0.5, 0.6, 0.7, 0.85, 1.0)  # candidate blocks for L2, as fractions of the model's depth


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _nll(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(-_log_softmax(logits)[np.arange(len(labels)), labels].mean())


@dataclass
class TemperatureScaler:
    """L1: ``softmax(log p / T)`` on top of L0, with the prior the calibration items were read with."""

    temperature: float = 1.0
    prior: np.ndarray | None = None  # [P, K] by position, frozen from the calibration read
    n_calib: int = 0

    @classmethod
    def fit(
        cls,
        probs: np.ndarray,
        labels: Sequence[int],
        log_t_range: tuple[float, float] = (-3.0, 3.0),
        iters: int = 60,
    ) -> TemperatureScaler:
        """Golden-section search on log T in ``log_t_range`` minimising the NLL of ``labels``."""
        y = np.asarray(labels, dtype=int)
        logits = np.log(np.clip(np.asarray(probs, dtype=np.float64), EPS, None))
        phi = (np.sqrt(5.0) - 1.0) / 2.0
        a, b = log_t_range
        c, d = b - phi * (b - a), a + phi * (b - a)
        fc, fd = _nll(logits / np.exp(c), y), _nll(logits / np.exp(d), y)
        for _ in range(iters):
            if fc < fd:
                b, d, fd = d, c, fc
                c = b - phi * (b - a)
                fc = _nll(logits / np.exp(c), y)
            else:
                a, c, fc = c, d, fd
                d = a + phi * (b - a)
                fd = _nll(logits / np.exp(d), y)
        return cls(temperature=float(np.exp((a + b) / 2.0)), n_calib=len(y))

    def apply(self, probs: np.ndarray) -> np.ndarray:
        logits = np.log(np.clip(np.asarray(probs, dtype=np.float64), EPS, None))
        return np.exp(_log_softmax(logits / self.temperature))


def _onehot(y: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros((len(y), k))
    out[np.arange(len(y)), y] = 1.0
    return out


def solve_lda(x: np.ndarray, y: np.ndarray, k: int, shrinkage: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """Shrunk LDA on standardised features: ``S = (1 - a) R'R / (n - 1) + a tau I`` (Woodbury, n x n)."""
    n, d = x.shape
    means = np.stack([x[y == c].mean(axis=0) if np.any(y == c) else x.mean(axis=0) for c in range(k)])
    resid = x - means[y]
    tau = float((resid * resid).sum() / max(1, n - 1) / d)
    a = float(np.clip(shrinkage, 1e-3, 1.0))
    m = means.T
    if a >= 1.0:
        w = m / (a * tau)
    else:
        c = (1.0 - a) / max(1, n - 1)
        inner = (a * tau) * np.eye(n) + c * (resid @ resid.T)
        w = (m - c * resid.T @ np.linalg.solve(inner, resid @ m)) / (a * tau)
    counts = np.array([max(1, np.sum(y == c)) for c in range(k)], dtype=float)
    b = -0.5 * np.einsum("cd,dc->c", means, w) + np.log(counts / counts.sum())
    return w, b


def solve_ridge(x: np.ndarray, y: np.ndarray, k: int, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Least squares onto one-hot labels with an L2 penalty, in the dual (an n x n solve)."""
    targets = _onehot(y, k)
    xm, ym = x.mean(axis=0), targets.mean(axis=0)
    xc, yc = x - xm, targets - ym
    w = xc.T @ np.linalg.solve(xc @ xc.T + lam * np.eye(len(xc)), yc)
    return w, ym - xm @ w


SOLVERS = {"lda": solve_lda, "ridge": solve_ridge}


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x.mean(axis=0), x.std(axis=0) + 1e-6


def _softmax(z: np.ndarray) -> np.ndarray:
    return np.exp(_log_softmax(z))


@dataclass
class LinearHead:
    """L2: ``softmax(((h - mean) / scale) @ W + b) / T)`` on the hidden state of block ``layer``."""

    kind: str
    layer: int  # the block whose output it reads (hidden-state index: 0 = embeddings)
    w: np.ndarray
    b: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    temperature: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)
    cv: dict[str, float] = field(default_factory=dict)

    def scores(self, features: np.ndarray) -> np.ndarray:
        return ((np.asarray(features, dtype=np.float64) - self.mean) / self.scale) @ self.w + self.b

    def probs(self, features: np.ndarray) -> np.ndarray:
        return _softmax(self.scores(features) / self.temperature)


def folds(n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    idx = np.random.RandomState(seed).permutation(n)
    return [np.sort(f) for f in np.array_split(idx, min(k, n))]


def _out_of_fold(
    kind: str, x: np.ndarray, y: np.ndarray, k: int, params: dict, parts: list[np.ndarray]
) -> np.ndarray:
    out = np.zeros((len(y), k))
    for f in parts:
        train = np.setdiff1d(np.arange(len(y)), f)
        mean, scale = _standardise(x[train])
        w, b = SOLVERS[kind]((x[train] - mean) / scale, y[train], k, **params)
        out[f] = ((x[f] - mean) / scale) @ w + b
    return out


def fit_head(
    features: np.ndarray,
    labels: Sequence[int],
    k: int,
    kind: str = "lda",
    layers: Sequence[int] | None = None,
    n_folds: int = 5,
    seed: int = 0,
) -> LinearHead:
    """Fit one head kind: ``features`` ``[N, L, d]`` at L candidate ``layers`` (or ``[N, d]``).

    The layer and hyper-parameters minimise the out-of-fold NLL after a temperature fitted on the
    out-of-fold scores; the head is then refitted on all items with that temperature.
    """
    if kind not in SOLVERS:
        raise ValueError(f"unknown head {kind!r}; use one of {', '.join(SOLVERS)}")
    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim == 2:
        feats = feats[:, None, :]
    layers = list(layers) if layers is not None else list(range(feats.shape[1]))
    y = np.asarray(labels, dtype=int)
    if len(y) < max(8, 2 * k):
        raise ValueError(
            f"an L2 head needs at least max(8, 2K) = {max(8, 2 * k)} labelled items, got {len(y)}"
        )
    parts = folds(len(y), n_folds, seed)
    best = None
    for li in range(feats.shape[1]):
        x = feats[:, li, :]
        for params in GRIDS[kind]:
            try:
                oof = _out_of_fold(kind, x, y, k, params, parts)
            except np.linalg.LinAlgError:
                continue
            scaler = TemperatureScaler.fit(_softmax(oof), y)
            p = scaler.apply(_softmax(oof))
            nll = float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], EPS, None))))
            if best is None or nll < best[0]:
                acc = float(np.mean(np.argmax(oof, axis=1) == y))
                best = (nll, acc, li, params, scaler.temperature)
    if best is None:
        raise np.linalg.LinAlgError("every head configuration failed to solve")
    nll, acc, li, params, temperature = best
    x = feats[:, li, :]
    mean, scale = _standardise(x)
    w, b = SOLVERS[kind]((x - mean) / scale, y, k, **params)
    return LinearHead(
        kind, int(layers[li]), w, b, mean, scale, temperature, dict(params), {"oof_nll": nll, "oof_acc": acc}
    )


def candidate_layers(num_layers: int) -> list[int]:
    """Blocks at 50, 60, 70, 85 and 100 % of the depth (hidden-state indices, deduplicated)."""
    return sorted({max(1, round(f * num_layers)) for f in DEPTHS})
