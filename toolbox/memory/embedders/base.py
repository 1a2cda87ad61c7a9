"""Embedder: texts in, unit-normalised float32 vectors out, in batches.

``identity`` names the embedder and every setting that changes its vectors; it keys the embedding
cache and is written into a memory store, so a store refuses to be searched with vectors of
another embedder.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.where(norms == 0, 1.0, norms), dtype=np.float32)


class Embedder(ABC):
    """Maps texts to ``(n, dim)`` unit vectors; ``embed`` batches ``batch_size`` texts at a time."""

    dim: int
    batch_size: int = 64

    @property
    @abstractmethod
    def identity(self) -> str:
        """A stable name of the embedder and of every setting that changes its output."""

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch; rows need not be normalised."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        bad = next((t for t in texts if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"embedders take strings, got {type(bad).__name__}: {bad!r}")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            self._embed_batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)
        ]
        return normalize_rows(np.concatenate(parts, axis=0))

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]
