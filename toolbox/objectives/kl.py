"""Per-token KL estimators between the policy and a frozen reference (Schulman, "Approximating KL").

With samples from the policy π and ``log r = log π_ref − log π`` per token:

- ``k1 = −log r``: unbiased, high variance, can be negative;
- ``k2 = ½ (log r)²``: biased, low variance, never negative;
- ``k3 = r − 1 − log r``: unbiased, low variance, never negative, 0 exactly where π = π_ref
  (the GRPO paper's and TRL's choice; computed as ``expm1(log r) − log r``, clamped at 0, so float
  rounding never makes it negative).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """The per-token estimate of KL(π ‖ π_ref); same shape as the inputs, differentiable in ``logprobs``."""
    log_r = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    if estimator == "k3":
        # expm1 keeps r − 1 exact for small log r; the clamp removes float rounding below 0
        return (torch.expm1(log_r) - log_r).clamp(min=0)
    raise ValueError(f"unknown KL estimator {estimator!r}; choose k1, k2 or k3")
