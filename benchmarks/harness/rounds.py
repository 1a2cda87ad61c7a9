"""Alternating rounds: every side runs once a round, in a rotated order (A B, B A, A B, ...), so
each meets the same background load; figures are kept unrounded, summarised as min/median/max, and
ratios are taken round by round from the unrounded values."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from harness.settings import TorchSettings


def spread(values: list[float]) -> dict:
    """``{"each", "min", "median", "max"}`` of unrounded values."""
    if not values:
        raise ValueError("spread of no values: the benchmark ran no rounds (--rounds must be >= 1).")
    return {"each": list(values), "min": min(values), "median": statistics.median(values), "max": max(values)}


class Rounds:
    """Run ``sides`` (name -> a function returning that round's figures) ``rounds`` times, alternating.
    ``settings`` None: the sides run no torch in this process (each times a subprocess)."""

    def __init__(
        self,
        sides: dict[str, Callable[[], dict[str, float]]],
        settings: TorchSettings | None,
        rounds: int,
    ):
        if rounds < 1:
            raise ValueError(
                f"--rounds {rounds}: a benchmark needs at least one round; use --rounds 3 or more."
            )
        self.sides = sides
        self.settings = settings
        self.rounds = rounds
        self.each: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        self.orders: list[list[str]] = []

    def run(self) -> Rounds:
        names = list(self.sides)
        for r in range(self.rounds):
            k = r % len(names)
            order = names[k:] + names[:k]
            for name in order:
                if self.settings is not None:
                    self.settings.apply()
                self.each[name].append(self.sides[name]())
                if self.settings is not None:
                    self.settings.check(name)
            self.orders.append(order)
        return self

    def values(self, side: str, figure: str) -> list[float]:
        return [round_figures[figure] for round_figures in self.each[side]]

    def summary(self) -> dict:
        """Every side's figures as min/median/max over the rounds."""
        return {
            side: {figure: spread(self.values(side, figure)) for figure in rounds[0]}
            for side, rounds in self.each.items()
        }

    def ratio(self, ours: str, peer: str, figure: str, higher_is_better: bool = True) -> dict:
        """ours / peer per round (peer / ours for a time, where lower is better), > 1 = ours better;
        with the ratio of the two medians beside the spread of the per-round ratios."""
        a, b = self.values(ours, figure), self.values(peer, figure)
        each = [x / y if higher_is_better else y / x for x, y in zip(a, b, strict=True)]
        ma, mb = statistics.median(a), statistics.median(b)
        return {
            "figure": figure,
            "ours": ours,
            "peer": peer,
            **spread(each),
            "of_medians": ma / mb if higher_is_better else mb / ma,
        }
