"""VectorIndex: the one interface the memory store searches through.

Vectors are unit-normalised float32 rows, keyed by int64 ids (the store's item ids); the score is
the inner product, i.e. the cosine similarity. ``search`` returns ``(ids, scores)`` arrays of shape
``(num_queries, k)``, best first, padded with id ``-1`` and score ``-inf`` where fewer than ``k``
items qualify. ``allowed`` restricts a search to a set of ids (a metadata filter's result): the
restricted search is exact whenever the allowed set is small, so a filter never loses an item
there.

An index saves itself into a folder of its own (``save(folder)``); the store decides which folder
is the current one, so a crash while saving leaves the previous folder in use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np


def as_matrix(vectors: np.ndarray, dim: int) -> np.ndarray:
    """``vectors`` as a C-contiguous float32 ``(n, dim)`` matrix, or a clear error."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"expected vectors of dimension {dim}, got an array of shape {arr.shape}")
    return np.ascontiguousarray(arr)


def top_k(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of each row of ``scores`` (``(m, n)``), best first, padded to ``k``."""
    m, n = scores.shape
    out_ids = np.full((m, k), -1, dtype=np.int64)
    out_scores = np.full((m, k), -np.inf, dtype=np.float32)
    if n == 0 or k == 0:
        return out_ids, out_scores
    kk = min(k, n)
    part = np.argpartition(-scores, kk - 1, axis=1)[:, :kk] if kk < n else np.tile(np.arange(n), (m, 1))
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    best = np.take_along_axis(part, order, axis=1)
    out_ids[:, :kk] = ids[best]
    out_scores[:, :kk] = np.take_along_axis(scores, best, axis=1)
    return out_ids, out_scores


class VectorIndex(ABC):
    """Inner-product search over unit vectors keyed by int64 ids."""

    def __init__(self, dim: int) -> None:
        if dim < 1:
            raise ValueError(f"index dimension must be >= 1, got {dim}")
        self.dim = dim

    @abstractmethod
    def __len__(self) -> int:
        """The number of live vectors."""

    @abstractmethod
    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Insert vectors; an id already present has its vector replaced."""

    @abstractmethod
    def remove(self, ids: np.ndarray) -> None:
        """Remove ids; ids not present are ignored."""

    @abstractmethod
    def search(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest ids of each query (optionally among ``allowed`` only), best first."""

    def search_one(self, query: np.ndarray, k: int) -> tuple[np.ndarray, list[float]]:
        """One query (a ``(1, dim)`` float32 row, not necessarily of norm 1: it is normalised
        here): the ``k`` nearest ids (an int64 array, no padding) and their scores (a list), best
        first. The store's search by similarity alone calls this, so an index may answer it with
        fewer steps than ``search``."""
        norm = float(np.sqrt(query[0].dot(query[0])))
        ids, scores = self.search(query * (1.0 / norm) if norm > 0 else query, k)
        sims = scores[0].tolist()
        n = sims.index(-np.inf) if sims and sims[-1] == -np.inf else len(sims)
        return ids[0][:n], sims[:n]

    @abstractmethod
    def get(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of ``ids`` (all must be present)."""

    @abstractmethod
    def ids(self) -> np.ndarray:
        """Every live id (any order)."""

    @abstractmethod
    def save(self, folder: Path) -> None:
        """Write the index into ``folder`` (which exists and is empty), fsynced."""

    @classmethod
    @abstractmethod
    def load(cls, folder: Path, dim: int, **settings) -> VectorIndex:
        """Read an index written by ``save``."""

    def exact_search(self, queries: np.ndarray, k: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Brute force over the vectors of ``ids``: the reference any restricted search falls back to."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return top_k(np.zeros((len(queries), 0), np.float32), ids, k)
        return top_k(queries @ self.get(ids).T, ids, k)
