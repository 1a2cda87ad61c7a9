"""Exact search: one matrix product over every stored vector (the reference for the others)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from toolbox.core.registries import VECTOR_INDEXES
from toolbox.memory.index.base import VectorIndex, as_matrix, top_k


@VECTOR_INDEXES.register("exact")
class ExactIndex(VectorIndex):
    """Brute-force inner product over a float32 matrix: exact, O(n·dim) per query.

    Args:
        dim: vector dimension (set by the store from its embedder).
    """

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._pos: dict[int, int] = {}
        self._n = 0

    @classmethod
    def from_arrays(cls, ids: np.ndarray, vectors: np.ndarray) -> ExactIndex:
        """An index over ``vectors`` (used as is, not copied) with unique ``ids``."""
        vectors = as_matrix(vectors, np.asarray(vectors).shape[-1])
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) != len(vectors) or len(set(ids.tolist())) != len(ids):
            raise ValueError("from_arrays needs one unique id per vector")
        index = cls(vectors.shape[1])
        index._vectors, index._ids, index._n = vectors, ids.copy(), len(ids)
        index._pos = {i: p for p, i in enumerate(ids.tolist())}
        return index

    def __len__(self) -> int:
        return self._n

    def _reserve(self, n: int) -> None:
        if n <= len(self._vectors):
            return
        cap = max(n, 2 * len(self._vectors), 1024)
        vectors = np.zeros((cap, self.dim), dtype=np.float32)
        vectors[: self._n] = self._vectors[: self._n]
        ids = np.full(cap, -1, dtype=np.int64)
        ids[: self._n] = self._ids[: self._n]
        self._vectors, self._ids = vectors, ids

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = as_matrix(vectors, self.dim)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        self._reserve(self._n + len(ids))
        new = ids.tolist()
        if len(set(new)) == len(new) and self._pos.keys().isdisjoint(new):  # all new: one block copy
            start, self._n = self._n, self._n + len(new)
            self._vectors[start : self._n] = vectors
            self._ids[start : self._n] = ids
            self._pos.update(zip(new, range(start, self._n), strict=True))
            return
        for i, v in zip(new, vectors, strict=True):
            pos = self._pos.get(i)
            if pos is None:
                pos = self._n
                self._pos[i] = pos
                self._ids[pos] = i
                self._n += 1
            self._vectors[pos] = v

    def remove(self, ids: np.ndarray) -> None:
        for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
            pos = self._pos.pop(i, None)
            if pos is None:
                continue
            last = self._n - 1
            if pos != last:  # move the last row into the hole
                moved = int(self._ids[last])
                self._vectors[pos] = self._vectors[last]
                self._ids[pos] = moved
                self._pos[moved] = pos
            self._ids[last] = -1
            self._n -= 1

    def search(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = as_matrix(queries, self.dim)
        if allowed is not None:
            return self.exact_search(queries, k, allowed)
        return top_k(queries @ self._vectors[: self._n].T, self._ids[: self._n], k)

    def get(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        try:
            rows = [self._pos[i] for i in ids.tolist()]
        except KeyError as e:
            raise KeyError(f"id {e.args[0]} is not in the index") from None
        return self._vectors[rows]

    def ids(self) -> np.ndarray:
        return self._ids[: self._n].copy()

    def save(self, folder: Path) -> None:
        path = Path(folder) / "exact.npz"
        with open(path, "wb") as f:
            np.savez(f, ids=self._ids[: self._n], vectors=self._vectors[: self._n])
            f.flush()
            os.fsync(f.fileno())

    @classmethod
    def load(cls, folder: Path, dim: int, **settings) -> ExactIndex:
        with np.load(Path(folder) / "exact.npz") as data:
            ids, vectors = data["ids"], data["vectors"]
        if vectors.shape[1:] != (dim,):
            raise ValueError(f"{folder}: the saved vectors have shape {vectors.shape}, expected (n, {dim})")
        index = cls.from_arrays(ids, vectors)
        for key, value in settings.items():
            setattr(index, key, value)
        return index
