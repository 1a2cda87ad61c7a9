"""Gaussian blobs: a generated classification set whose facts (in_dim, num_classes) reach the model."""

from __future__ import annotations

import torch

from toolbox.core.bounds import AtLeastOne, NonNegativeFloat, NonNegativeInt
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits


@SOURCES.register("blobs")
def blobs(
    num_classes: AtLeastOne = 3,
    in_dim: AtLeastOne = 2,
    num_train: AtLeastOne = 600,
    num_test: NonNegativeInt = 150,
    spread: NonNegativeFloat = 0.5,
    seed: int = 0,
) -> Splits:
    """Points around ``num_classes`` random centres; records {x: list[float], y: int}.

    Args:
        num_classes: clusters, one class each.
        in_dim: dimensions of a point.
        num_train: training points.
        num_test: held-out points.
        spread: standard deviation of each cluster (centres are drawn from N(0, 2²)).
        seed: seed of the draw.
    """
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(num_classes, in_dim, generator=g) * 2.0
    n = num_train + num_test
    y = torch.randint(0, num_classes, (n,), generator=g)
    x = centres[y] + spread * torch.randn(n, in_dim, generator=g)
    records = [
        {"x": [round(v, 6) for v in row], "y": int(label)}
        for row, label in zip(x.tolist(), y.tolist(), strict=True)
    ]
    return Splits(records[:num_train], records[num_train:], {"in_dim": in_dim, "num_classes": num_classes})
