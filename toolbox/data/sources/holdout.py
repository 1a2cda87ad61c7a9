"""Holding out a seeded random part of the training records as the test split."""

from __future__ import annotations

import random
from collections.abc import Sequence

from toolbox.core.errors import ConfigError
from toolbox.data.base import Record


def hold_out(records: Sequence[Record], num_test: int, seed: int, setting: str) -> tuple[list, list]:
    """Shuffle ``records`` with ``seed``; return (train, test) with ``num_test`` test records.

    ``setting`` names the config key that asked for the split, for the error message.
    """
    if not 0 <= num_test < len(records):
        raise ConfigError(
            f"{setting}: cannot hold out {num_test} of {len(records)} records as the test split "
            f"and keep any for training; lower {setting}."
        )
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    test = [records[i] for i in sorted(order[:num_test])]
    train = [records[i] for i in sorted(order[num_test:])]
    return train, test


def fraction_to_count(fraction: float, total: int, setting: str) -> int:
    """The number of records ``fraction`` of ``total`` holds out (at least one)."""
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"{setting}: {fraction} is not a fraction in (0, 1); set it to e.g. 0.05.")
    return max(1, round(fraction * total))
