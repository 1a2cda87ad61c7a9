"""Approximate search: an HNSW graph from hnswlib.

Why hnswlib: it deletes and reuses slots (``mark_deleted``, ``replace_deleted``) and filters a
search (``knn_query(filter=...)``), which an episodic memory needs; faiss's HNSW cannot remove a
vector and usearch's Python search takes no filter. It was also the fastest of the three here: the
measurements are in ``benchmarks/results/memory_libraries.md``.

Updates: hnswlib can overwrite a label's vector in place, but next to deleted elements that hurts
the graph: in ``tests/memory/test_index.py::test_hnsw_recall_deletes_updates_and_reload`` (2,000
clustered vectors, 200 deleted, then 100 overwritten) in-place updates gave recall@10 0.91 at
ef=64 (0.945 at ef=256, one run). So each insert gets a fresh hnswlib label (an id maps to its
current label) and an update is a delete plus an insert: 0.966 and 0.999 on the same operations;
the test asserts >= 0.95 at ef=64.

The index keeps its own float32 copy of the vectors (an ``ExactIndex``) beside the graph:
hnswlib's ``get_items`` copies through Python lists (~0.15 ms per vector here), too slow for the
exact searches below, and the copy makes ``get`` and index conversion cheap. It doubles the vector
memory (1.5 GiB more at 1M × 384), but not the snapshot: ``hnsw.bin`` holds every vector already
(hnswlib's level-0 block: links, vector, label per element), so ``load`` reads the copy from there
(``saved_vectors``) instead of from a second file (``exact.npz``, which dominated a store's fill
time beyond hnswlib's adds: see ``benchmarks/results/memory_libraries.md``). Stores of schema 1
still have it and are read from it.

Restricted searches (``allowed``): up to ``exact_below`` allowed ids are scored exactly (a gather
and a matmul, so a narrow filter never misses an item); beyond that, hnswlib walks the graph with
the filter as a predicate, and any query it cannot fill falls back to the exact search.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from toolbox.core.registries import VECTOR_INDEXES
from toolbox.memory.index.base import VectorIndex, as_matrix
from toolbox.memory.index.exact import ExactIndex


@VECTOR_INDEXES.register("hnsw")
class HnswIndex(VectorIndex):
    """HNSW graph (hnswlib, cosine space: the inner product of normalised rows) with native
    deletes, updates and filtered search.

    Args:
        dim: vector dimension (set by the store from its embedder).
        M: graph degree; more links, better recall, more memory (hnswlib's ``M``).
        ef_construction: candidate list size while inserting; higher builds a better graph.
        ef_search: candidate list size while searching (raised to ``k`` when smaller); the
            recall/latency knob.
        threads: threads for batched adds (0: all cores); single queries use one thread.
        exact_below: restricted searches over at most this many ids are exact.
    """

    def __init__(
        self,
        dim: int,
        M: int = 16,
        ef_construction: int = 100,
        ef_search: int = 64,
        threads: int = 0,
        exact_below: int = 20000,
    ) -> None:
        super().__init__(dim)
        import hnswlib

        self.M, self.ef_construction, self.ef_search = M, ef_construction, ef_search
        self.threads = threads if threads > 0 else (os.cpu_count() or 1)
        self.exact_below = exact_below
        # "cosine": hnswlib's inner product, with every added vector and query normalised in C++
        # (the store adds unit vectors; a query vector comes as the caller gave it: search_one)
        self._index = hnswlib.Index(space="cosine", dim=dim)
        self._index.init_index(
            max_elements=1024, M=M, ef_construction=ef_construction, allow_replace_deleted=True
        )
        self._vectors = ExactIndex(dim)  # the live ids and their vectors
        self._label: dict[int, int] = {}  # id -> its hnswlib label (a fresh one per insert)
        self._id = np.full(1024, -1, dtype=np.int64)  # label -> id (-1: deleted), one gather per search
        self._next_label = 0
        self._ef = -1  # the ef last given to hnswlib

    def __len__(self) -> int:
        return len(self._vectors)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = as_matrix(vectors, self.dim)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        if len(ids) == 0:
            return
        last = {i: j for j, i in enumerate(ids.tolist())}  # an id twice in one call: the last wins
        if len(last) != len(ids):
            keep = np.fromiter(last.values(), dtype=np.int64)
            ids, vectors = ids[keep], vectors[keep]
        self._drop(ids)  # an update is a delete plus an insert under a fresh label
        labels = np.arange(self._next_label, self._next_label + len(ids), dtype=np.int64)
        self._next_label += len(ids)
        # deleted slots are reused (replace_deleted), so capacity has to cover the live count only
        cap = self._index.get_max_elements()
        if len(self._vectors) + len(ids) > cap:
            self._index.resize_index(max(len(self._vectors) + len(ids), 2 * cap))
        self._index.add_items(vectors, labels, num_threads=self.threads, replace_deleted=True)
        if self._next_label > len(self._id):
            grown = np.full(max(self._next_label, 2 * len(self._id)), -1, dtype=np.int64)
            grown[: len(self._id)] = self._id
            self._id = grown
        self._id[labels] = ids
        self._label.update(zip(ids.tolist(), labels.tolist(), strict=True))
        self._vectors.add(ids, vectors)

    def _drop(self, ids: np.ndarray) -> None:
        for i in ids.tolist():
            label = self._label.pop(i, None)
            if label is not None:
                self._index.mark_deleted(label)
                self._id[label] = -1

    def remove(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        self._drop(ids)
        self._vectors.remove(ids)

    def search(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = as_matrix(queries, self.dim)
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=np.int64).reshape(-1)
            if len(allowed) <= max(self.exact_below, k):
                return self.exact_search(queries, k, allowed)
        n = len(self._label) if allowed is None else len(allowed)  # _label: the live ids (a dict len)
        kk = min(k, n)
        if kk == 0:
            return np.full((len(queries), k), -1, dtype=np.int64), np.full(
                (len(queries), k), -np.inf, np.float32
            )
        ef = max(self.ef_search, kk)
        if ef != self._ef:
            self._index.set_ef(ef)
            self._ef = ef
        try:
            if allowed is None:
                labels, dist = self._index.knn_query(queries, k=kk, num_threads=1)
            else:
                allowed_labels = {self._label[i] for i in allowed.tolist() if i in self._label}
                labels, dist = self._index.knn_query(
                    queries, k=kk, num_threads=1, filter=allowed_labels.__contains__
                )
        except RuntimeError:  # the graph walk found fewer than kk: answer exactly instead
            return self.exact_search(queries, k, self.ids() if allowed is None else allowed)
        ids = self._id[labels.astype(np.int64, copy=False)]
        scores = 1.0 - dist  # hnswlib's "cosine" distance is 1 - <q, x> of the normalised rows
        if kk < k:
            ids = np.pad(ids, ((0, 0), (0, k - kk)), constant_values=-1)
            scores = np.pad(scores, ((0, 0), (0, k - kk)), constant_values=-np.inf)
        return ids, scores

    def search_one(self, query: np.ndarray, k: int) -> tuple[np.ndarray, list[float]]:
        """``search`` of one query, without its checks and padding, and normalised by hnswlib: the
        steps around the graph walk run with the interpreter's code evicted from the CPU caches by
        the walk, where each numpy call costs 1-3 us (the walk at 100k items, ef 64: ~140 us)."""
        kk = min(k, len(self._label))
        ef = max(self.ef_search, kk)
        if ef != self._ef or kk == 0:
            return super().search_one(query, k)  # sets ef; answers an empty index
        try:
            labels, dist = self._index.knn_query(query, k=kk, num_threads=1)
        except RuntimeError:  # the graph walk found fewer than kk: ``search`` answers exactly
            return super().search_one(query, k)
        return self._id.take(labels[0]), [1.0 - d for d in dist[0].tolist()]  # take: no uint64 cast

    def get(self, ids: np.ndarray) -> np.ndarray:
        return self._vectors.get(ids)

    def exact_search(self, queries: np.ndarray, k: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._vectors.search(queries, k, ids)

    def ids(self) -> np.ndarray:
        return self._vectors.ids()

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        self._index.save_index(str(folder / "hnsw.bin"))
        pairs = np.array([[self._next_label, -1], *self._label.items()], dtype=np.int64)
        with open(folder / "labels.npy", "wb") as f:  # row 0: the next label; then (id, label)
            np.save(f, pairs)
        for name in ("hnsw.bin", "labels.npy"):
            fd = os.open(folder / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    @classmethod
    def load(cls, folder: Path, dim: int, **settings) -> HnswIndex:
        folder = Path(folder)
        index = cls(dim, **settings)
        index._index.load_index(str(folder / "hnsw.bin"), max_elements=0, allow_replace_deleted=True)
        pairs = np.load(folder / "labels.npy")
        if (folder / "exact.npz").exists():  # a snapshot of store schema 1
            index._vectors = ExactIndex.load(folder, dim)
        else:
            index._vectors = ExactIndex.from_arrays(
                pairs[1:, 0], saved_vectors(folder / "hnsw.bin", dim, pairs[1:, 1])
            )
        index._next_label = int(pairs[0, 0])
        index._label = dict(zip(pairs[1:, 0].tolist(), pairs[1:, 1].tolist(), strict=True))
        index._id = np.full(max(index._next_label, 1024), -1, dtype=np.int64)
        index._id[pairs[1:, 1]] = pairs[1:, 0]
        return index


# hnswlib's saveIndex header (0.8.0): offsetLevel0_, max_elements_, cur_element_count,
# size_data_per_element_, label_offset_, offsetData_ (size_t each), maxlevel_ (int),
# enterpoint_node_ (uint32), maxM_, maxM0_, M_ (size_t), mult_ (double), ef_construction_ (size_t);
# then cur_element_count elements of size_data_per_element_ bytes: links, vector, label
_HEADER = 96


def saved_vectors(path: Path, dim: int, labels: np.ndarray) -> np.ndarray:
    """The vectors stored under ``labels`` in a file hnswlib's ``save_index`` wrote (float32, one
    row per label, as hnswlib holds them: normalised in the cosine space)."""
    head = np.fromfile(path, dtype="<u8", count=6)
    offset0, _, count, size, label_at, data_at = (int(x) for x in head)
    if offset0 != 0 or label_at - data_at != 4 * dim or size < label_at + 8:
        raise ValueError(
            f"{path}: not an hnswlib index of dimension {dim} in the layout this toolbox reads "
            f"(label offset {label_at}, data offset {data_at}, element size {size})."
        )
    block = np.memmap(path, dtype=np.uint8, mode="r", offset=_HEADER, shape=(count, size))
    stored = np.ascontiguousarray(block[:, label_at : label_at + 8]).view("<u8").ravel().astype(np.int64)
    order = np.argsort(stored, kind="stable")
    labels = np.asarray(labels, dtype=np.int64)
    at = order[np.searchsorted(stored, labels, sorter=order).clip(0, max(count - 1, 0))] if count else order
    if len(labels) and (count == 0 or not np.array_equal(stored[at], labels)):
        raise ValueError(f"{path}: some labels of labels.npy are not in the saved index.")
    return np.ascontiguousarray(block[at, data_at:label_at]).view(np.float32).reshape(len(labels), dim)
