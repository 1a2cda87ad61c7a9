"""A resumable, rank-aware batch loader.

Each epoch visits the examples in a permutation drawn from ``seed + epoch``; rank ``r`` of ``w``
takes every ``w``-th index of it. The position (epoch, offset) is part of every checkpoint, so a
resumed run sees exactly the batches the uninterrupted run would have seen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


class BatchLoader:
    def __init__(
        self,
        examples: Sequence[Any],
        batch_size: int,
        collate: Callable[[list[Any]], dict[str, Any]],
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if len(examples) < batch_size * world_size:
            raise ValueError(
                f"{len(examples)} examples cannot fill one batch of {batch_size} on {world_size} rank(s); "
                "lower trainer.batch_size or add data."
            )
        self.examples = examples
        self.batch_size = batch_size
        self.collate = collate
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.offset = 0  # batches already drawn in this epoch
        self._order = self._permutation()

    def _permutation(self) -> list[int]:
        n = len(self.examples)
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        per_rank = n // self.world_size
        return order[self.rank : per_rank * self.world_size : self.world_size]

    @property
    def batches_per_epoch(self) -> int:
        return len(self._order) // self.batch_size

    def next_batch(self) -> dict[str, Any]:
        if self.offset >= self.batches_per_epoch:
            self.epoch += 1
            self.offset = 0
            self._order = self._permutation()
        idx = self._order[self.offset * self.batch_size : (self.offset + 1) * self.batch_size]
        self.offset += 1
        return self.collate([self.examples[i] for i in idx])

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        self.offset = state["offset"]
        self._order = self._permutation()
