"""EpisodicMemory: a crash-safe local memory store (mem0's API, Letta's archival search).

A store is a folder::

    memory.sqlite     items, their history, the pending index log, metadata keys, FTS5 text index
    index-000007/     the vector index's own files (the generation named in SQLite's meta table)
    embeddings.sqlite the embedding cache (keyed by embedder identity and text)
    lock              held (flock) while a process has the store open

This module is the public face; each part is a module of its own: the SQLite rows
(``toolbox.memory.storage.row_store``), the pending log and index snapshots that make a SIGKILL harmless
(``toolbox.memory.storage.recovery``), the embedder and index checks on opening (``toolbox.memory.storage.opening``),
the size limit (``toolbox.memory.eviction``), the candidates and ranking of a search
(``toolbox.memory.ranking``), deduplication (``toolbox.memory.dedupe``), what an add accepts
(``toolbox.memory.records``), the metadata filters (``toolbox.memory.metadata_filters``) and the
in-memory rows of the items searches return (``toolbox.memory.storage.resident_rows``, every row, or
``toolbox.memory.storage.row_cache``, the recent ones).

Why this file is longer than ~400 lines: it is the whole public API of one class (open, add,
search, get, update, delete, history, flush, stats, export, close) with its argument docs; every
method is a short composition of the modules above, and splitting the class would scatter its API.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from toolbox.core.errors import ConfigError
from toolbox.memory import ranking
from toolbox.memory.dedupe import duplicates, merge
from toolbox.memory.embedders.base import Embedder
from toolbox.memory.eviction import EVICTION, victims
from toolbox.memory.metadata_filters import compile_filter, dumps_metadata
from toolbox.memory.records import batch, check_text, from_record, to_time
from toolbox.memory.storage.opening import acquire_lock, open_rows, resolve_index_spec
from toolbox.memory.storage.recovery import IndexLog
from toolbox.memory.storage.resident_rows import ResidentRows
from toolbox.memory.storage.row_cache import RowCache
from toolbox.memory.storage.row_store import (
    SCHEMA_VERSION,
    MemoryItem,
    MemoryStoreError,
    RowStore,
    Transaction,
)

__all__ = ["EpisodicMemory", "MemoryItem", "MemoryStoreError", "SCHEMA_VERSION"]
DEDUPE = ("off", "skip", "merge")
# batches of at least this many new items are added to the index beside the SQLite writes (smaller
# ones are not worth a thread)
BACKGROUND_ADD = 1024


class EpisodicMemory:
    """An episodic memory store in folder ``path`` (created if missing).

    Args:
        path: the store's folder.
        embedder: an ``Embedder``, or an ``EMBEDDERS`` config (``{"name": "minilm"}``); None: the
            embedder the store was created with (required for a new store).
        index: a ``VECTOR_INDEXES`` config (``{"name": "hnsw", "ef_search": 64}``) or a name;
            None: the store's own (a new store: ``exact``). Another kind than the stored one
            converts the index.
        dedupe: "off", "skip" (an add within ``dedupe_threshold`` of an item returns that item's
            id and stores nothing) or "merge" (also merges the new metadata into that item and
            records a ``merge`` in its history).
        dedupe_threshold: the cosine similarity at or above which two texts are duplicates.
        max_items: size limit; each add beyond it evicts items by ``eviction``.
        eviction: "oldest" (smallest timestamp), "lru" (least recently returned by get/search)
            or "importance" (lowest importance, then oldest).
        cache: keep an embedding cache in ``path/embeddings.sqlite``.
        flush_every: write the index snapshot after this many changes (or half the store, if
            larger); the pending log covers the changes in between.
        index_fields: metadata keys to give an SQLite expression index, so filters on them do not
            scan every row (worth it for fields filtered on often in a large store).
        row_cache: the item rows searches answer from memory: ``"all"`` (every row, compactly,
            loaded at the first search: no search reads SQLite; ``toolbox.memory.storage.resident_rows``),
            a number (at most that many rows, least recently returned dropped first;
            ``toolbox.memory.storage.row_cache``) or 0 (every search reads its hits from SQLite). Never
            stale: SQLite stays the source of truth.
    """

    def __init__(
        self,
        path: str | Path,
        embedder: Embedder | Mapping[str, Any] | None = None,
        index: Mapping[str, Any] | str | None = None,
        dedupe: str = "off",
        dedupe_threshold: float = 0.95,
        max_items: int | None = None,
        eviction: str = "oldest",
        cache: bool = True,
        flush_every: int = 25_000,
        index_fields: Sequence[str] = (),
        row_cache: int | str = "all",
    ) -> None:
        if dedupe not in DEDUPE:
            raise ConfigError(f"memory.dedupe: expected one of {', '.join(DEDUPE)}, got {dedupe!r}.")
        if eviction not in EVICTION:
            raise ConfigError(f"memory.eviction: expected one of {', '.join(EVICTION)}, got {eviction!r}.")
        if max_items is not None and max_items < 1:
            raise ConfigError(f"memory.max_items: must be at least 1 (or None), got {max_items}.")
        if row_cache != "all" and (isinstance(row_cache, str) or row_cache < 0):
            raise ConfigError(
                f"memory.row_cache: expected 'all' (every row in memory), a number of rows, or 0 "
                f"(off), got {row_cache!r}."
            )
        self.path = Path(path)
        self.dedupe, self.dedupe_threshold = dedupe, dedupe_threshold
        self.max_items, self.eviction, self.flush_every = max_items, eviction, flush_every
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock: int | None = acquire_lock(self.path)
        self._rows: RowStore | None = None
        try:
            self._rows, self.embedder, self._embedder_spec, meta = open_rows(self.path, embedder)
            self._cache: RowCache | ResidentRows = (
                ResidentRows(self._rows) if row_cache == "all" else RowCache(self._rows, int(row_cache))
            )
            index_spec = resolve_index_spec(index, meta)
            if meta is None:
                self._create(index_spec)
            elif int(meta["schema_version"]) < SCHEMA_VERSION:
                self._rows.migrate(int(meta["schema_version"]))
            for name in index_fields:
                self._rows.index_field(name)
            if cache:
                from toolbox.memory.embedders.cache import CachedEmbedder

                self.embedder = CachedEmbedder(self.embedder, self.path / "embeddings.sqlite")
            self.index_spec = index_spec
            self._log = IndexLog(self.path, self._rows)
            self.index = self._log.load(index_spec, self.embedder.dim)
            self._fields = self._rows.fields()
            self._count = self._rows.count()
            if len(self.index) != self._count:
                raise MemoryStoreError(
                    f"memory store {self.path}: the index holds {len(self.index)} vectors but SQLite "
                    f"{self._count} items; run `toolbox memory stats --store {self.path} --check` for details."
                )
        except BaseException:
            self._close_handles()
            raise

    def _create(self, index_spec: dict[str, Any]) -> None:
        assert self._rows is not None
        self._rows.create(
            {
                "schema_version": str(SCHEMA_VERSION),
                "dim": str(self.embedder.dim),
                "embedder": self.embedder.identity,
                "embedder_spec": json.dumps(self._embedder_spec, sort_keys=True),
                "index_spec": json.dumps(index_spec, sort_keys=True),
                "index_gen": "0",
                "index_seq": "0",
                "created_at": repr(time.time()),
            }
        )

    @property
    def _gen(self) -> int:
        """The current index snapshot's generation (its folder is ``index-<gen>``)."""
        return self._log.gen

    def _transaction(self) -> Transaction:
        if self._rows is None:
            raise MemoryStoreError(f"memory store {self.path} is closed.")
        return self._rows.transaction()

    # adding ---------------------------------------------------------------------------------------
    def add(
        self,
        text: str | Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
        timestamp: float | str | datetime | None = None,
        importance: float = 0.0,
        vector: np.ndarray | None = None,
    ) -> int:
        """Store one memory; return its id (an existing item's id if ``dedupe`` caught it).

        ``text`` may be a record ``{"text": ..., "metadata": ..., "timestamp": ..., "importance": ...}``.
        """
        if isinstance(text, Mapping):
            text, metadata, timestamp, importance = from_record(text, metadata, timestamp, importance)
        vectors = None if vector is None else np.asarray(vector, dtype=np.float32)[None, :]
        return self.add_many([text], [metadata], [timestamp], [importance], vectors=vectors)[0]

    def add_many(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        timestamps: Sequence[float | str | datetime | None] | None = None,
        importances: Sequence[float] | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[int]:
        """Store many memories in one transaction (embedded in batches); return their ids."""
        now = time.time()
        b = batch(self.embedder, now, texts, metadatas, timestamps, importances, vectors)
        n, texts, metadatas, vectors = len(b.texts), b.texts, b.metadatas, b.vectors
        meta_json, stamps, importances = b.meta_json, b.stamps, b.importances
        duplicate_of = (
            duplicates(self.index, vectors, self.dedupe_threshold) if self.dedupe != "off" else [None] * n
        )
        keys = {k for m in metadatas for k in (m or {})}
        ids: list[int] = [0] * n
        # a large batch goes into the index on a thread while SQLite writes its rows (both release
        # the GIL): the index's add keeps every core busy, the SQLite side one, and done one after
        # the other a core idled through the SQLite side; if the rows do not commit, the vectors
        # come out again, so the index never holds an item SQLite does not
        adding: Future | None = None
        new_ids = np.zeros(0, dtype=np.int64)
        try:
            with self._transaction() as db:
                next_id = RowStore.next_id(db)
                new_idx = []
                for i in range(n):
                    dup = duplicate_of[i]
                    if dup is not None:
                        ids[i] = ids[dup[1]] if dup[0] == "batch" else dup[1]
                        continue
                    ids[i] = next_id
                    next_id += 1
                    new_idx.append(i)
                new_ids = np.array([ids[i] for i in new_idx], dtype=np.int64)
                if len(new_idx) >= BACKGROUND_ADD:
                    pool = ThreadPoolExecutor(1, thread_name_prefix="memory-index-add")
                    adding = pool.submit(self.index.add, new_ids, vectors[new_idx])
                    pool.shutdown(wait=False)  # its thread ends with this task
                new_rows = [
                    (ids[i], texts[i], meta_json[i], stamps[i], importances[i], now, now) for i in new_idx
                ]
                history = [(ids[i], "add", texts[i], meta_json[i], now) for i in new_idx]
                pending = [(ids[i], vectors[i].tobytes()) for i in new_idx]
                RowStore.insert(db, new_rows)
                if self.dedupe == "merge":
                    for i in range(n):
                        if duplicate_of[i] is not None:
                            self._cache.forget(
                                [ids[i]]
                            )  # before the commit (toolbox.memory.storage.row_cache)
                            merge(db, ids[i], texts[i], metadatas[i], stamps[i], importances[i], now)
                RowStore.record(db, history)
                first_seq = IndexLog.log(db, pending)
                RowStore.add_fields(db, keys)
                evicted = victims(db, self.eviction, self._count + len(new_rows), self.max_items)
                if evicted:
                    self._cache.forget(evicted)
                    RowStore.delete_rows(db, evicted, "evict", now)
                    IndexLog.log(db, [(i, None) for i in evicted])
        except BaseException:
            if adding is not None:
                wait([adding])
                self.index.remove(new_ids)  # not committed: out of the index too
            raise
        # committed: now the in-memory state follows
        self._fields |= keys
        if adding is not None:
            adding.result()  # its error, if it had one
        elif len(new_ids):
            self.index.add(new_ids, vectors[new_idx])
        self._count += len(new_rows)
        self._log.applied(first_seq, len(pending))
        if evicted:
            self.index.remove(np.array(evicted, dtype=np.int64))
            self._count -= len(evicted)
            self._log.applied_all()
        gone = set(evicted)  # rows evicted by their own add are not put in
        self._cache.added([r for r in new_rows if r[0] not in gone] if gone else new_rows)
        self._maybe_flush()
        return ids

    # reading --------------------------------------------------------------------------------------
    def get(self, item_id: int) -> MemoryItem | None:
        """The item with this id, or None."""
        assert self._rows is not None
        item = self._rows.get(int(item_id))
        if item is not None and self.eviction == "lru":
            self._touch([item.id])
        return item

    def _touch(self, ids: list[int]) -> None:
        """The ``lru`` clock: these items were just used (in SQLite and in the cached rows)."""
        assert self._rows is not None
        now = time.time()
        self._cache.touched(ids, now)
        try:
            self._rows.touch(ids, now)
        except BaseException:  # not written (or not known to be): the cache must not claim it
            self._cache.forget(ids)
            raise

    def __len__(self) -> int:
        return self._count

    @property
    def fields(self) -> set[str]:
        """The metadata keys of the items added so far (what filters may name besides the columns)."""
        return set(self._fields)

    def where(self, filters: Mapping[str, Any] | None) -> list[int]:
        """The ids of every item matching ``filters`` (ascending)."""
        assert self._rows is not None
        return self._rows.where(*compile_filter(filters, self._fields))

    def items(self, filters: Mapping[str, Any] | None = None) -> Iterator[MemoryItem]:
        """Every item matching ``filters``, in id order."""
        assert self._rows is not None
        yield from self._rows.items(*compile_filter(filters, self._fields))

    def search(
        self,
        query: str | np.ndarray,
        k: int = 5,
        filters: Mapping[str, Any] | None = None,
        recency_half_life: float | None = None,
        recency_weight: float = 0.2,
        text_weight: float = 0.0,
        min_score: float | None = None,
        now: float | None = None,
    ) -> list[MemoryItem]:
        """The ``k`` best memories for ``query`` (a text or a vector), best first.

        Args:
            query: the text to embed, or a query vector.
            k: how many to return.
            filters: a metadata filter (``toolbox.memory.metadata_filters``); only matching items rank.
            recency_half_life: seconds after which an item's recency bonus halves (None: no bonus).
            recency_weight: the weight of the recency bonus (0..1 added to the similarity).
            text_weight: the weight of the FTS5 BM25 text match, normalised to 0..1 (0: off).
            min_score: drop items whose cosine similarity is below this.
            now: the time recency is measured from (default: now).
        """
        rows = self._rows
        assert rows is not None
        if k < 1:
            raise ConfigError(f"search: k must be at least 1, got {k}.")
        text = isinstance(query, str)
        blend = recency_half_life is not None or (text_weight > 0 and text)
        if not filters and not blend:  # similarity alone: the index's order is the ranking
            row = ranking.query_row(self.embedder, query)  # the index normalises it
            out = self._cache.ranked(*ranking.nearest(self.index, row, k, min_score))
            if self.eviction == "lru" and out:
                self._touch([it.id for it in out])
            return out
        qv = ranking.query_vector(self.embedder, query)
        n_cand = max(4 * k, 50) if blend else k
        cand = ranking.vector_candidates(self.index, rows, self._fields, self._count, qv, n_cand, filters)
        if cand is None:
            return []
        text_scores: dict[int, float] = {}
        if text_weight > 0 and text:
            where = compile_filter(filters, self._fields) if filters else None
            text_scores = ranking.text_candidates(cand, rows, self.index, query, qv, n_cand, where)  # type: ignore[arg-type]
        if min_score is not None:
            cand = {i: s for i, s in cand.items() if s >= min_score}
        if not cand:
            return []
        now = time.time() if now is None else now
        items = self._cache.fetch(list(cand))
        out = ranking.rank(items, cand, k, now, recency_half_life, recency_weight, text_scores, text_weight)
        if self.eviction == "lru" and out:
            self._touch([it.id for it in out])
        return out

    # changing -------------------------------------------------------------------------------------
    def update(
        self,
        item_id: int,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: float | str | datetime | None = None,
        importance: float | None = None,
    ) -> MemoryItem:
        """Change an item (a new text is re-embedded; ``metadata`` replaces the old); return it."""
        assert self._rows is not None
        item = self._rows.get(int(item_id))
        if item is None:
            raise KeyError(f"no memory item with id {item_id}")
        if text is not None:
            check_text(text)
        now = time.time()
        new_text = item.text if text is None else text
        new_meta = item.metadata if metadata is None else dict(metadata)
        meta_json = dumps_metadata(new_meta)
        new_time = item.timestamp if timestamp is None else to_time(timestamp, now)
        new_importance = item.importance if importance is None else float(importance)
        vector = self.embedder.embed([new_text])[0] if new_text != item.text else None
        self._cache.forget([item.id])  # before the commit (toolbox.memory.storage.row_cache)
        with self._transaction() as db:
            RowStore.update(db, item.id, new_text, meta_json, new_time, new_importance, now)
            if vector is not None:
                first = IndexLog.log(db, [(item.id, vector.tobytes())])
            RowStore.add_fields(db, set(new_meta))
        self._fields |= set(new_meta)
        if vector is not None:
            self.index.add(np.array([item.id], dtype=np.int64), vector[None, :])
            self._log.applied(first, 1)
        self._maybe_flush()
        return self.get(item.id)  # type: ignore[return-value]

    def delete(self, item_id: int) -> bool:
        """Delete one item; False if there was none with this id."""
        assert self._rows is not None
        if not self._rows.exists(int(item_id)):
            return False
        self._delete_ids([int(item_id)], "delete")
        return True

    def delete_where(self, filters: Mapping[str, Any]) -> int:
        """Delete every item matching ``filters`` (which must not be empty); return how many."""
        if not filters:
            raise ConfigError(
                "delete_where: refusing an empty filter, which would delete every memory; pass a filter "
                "such as {'source': 'eval'}, or delete the store's folder to start over."
            )
        ids = self.where(filters)
        if ids:
            self._delete_ids(ids, "delete")
        return len(ids)

    def _delete_ids(self, ids: list[int], op: str) -> None:
        self._cache.forget(ids)  # before the commit (toolbox.memory.storage.row_cache)
        with self._transaction() as db:
            RowStore.delete_rows(db, ids, op, time.time())
            IndexLog.log(db, [(i, None) for i in ids])
        self.index.remove(np.array(ids, dtype=np.int64))
        self._count -= len(ids)
        self._log.applied_all()
        self._maybe_flush()

    def history(self, item_id: int) -> list[dict[str, Any]]:
        """Every change of an item, oldest first: ``{seq, op, text, metadata, at}``.

        ``op`` is ``add``, ``update``, ``merge`` (a deduplicated add), ``delete`` or ``evict``.
        """
        assert self._rows is not None
        return self._rows.history(int(item_id))

    # persistence ----------------------------------------------------------------------------------
    def _maybe_flush(self) -> None:
        # each snapshot rewrites the whole index, so they come on a doubling schedule: after
        # flush_every changes or half the store, whichever is more (growing to 100k writes 175k
        # vectors' worth of index; a quarter wrote 250k, a tenth 550k). A reopen after a crash
        # replays at most that many changes, in batches (IndexLog.replay; timings in
        # benchmarks/results/measurement_notes.md)
        if self._log.unsaved >= max(self.flush_every, self._count // 2):
            self.flush()

    def flush(self) -> None:
        """Write the index snapshot and drop the pending rows it now contains."""
        if self._log.unsaved == 0 and self._log.gen > 0:
            return
        self._log.snapshot(self.index)

    def check(self) -> dict[str, Any]:
        """Compare the index with SQLite: ``{"items", "vectors", "missing", "extra", "ok"}``."""
        assert self._rows is not None
        rows = self._rows.all_ids()
        vecs = set(self.index.ids().tolist())
        return {
            "items": len(rows),
            "vectors": len(vecs),
            "missing": sorted(rows - vecs)[:20],
            "extra": sorted(vecs - rows)[:20],
            "ok": rows == vecs,
        }

    def stats(self) -> dict[str, Any]:
        assert self._rows is not None
        summary = self._rows.summary()
        size = sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
        return {
            "path": str(self.path),
            "items": self._count,
            "dim": self.embedder.dim,
            "embedder": self.embedder.identity,
            "index": self.index_spec,
            "index_generation": self._log.gen,
            "pending": self._log.unsaved,
            "history_rows": summary["history_rows"],
            "fields": sorted(self._fields),
            "oldest": summary["oldest"],
            "newest": summary["newest"],
            "max_items": self.max_items,
            "eviction": self.eviction,
            "dedupe": self.dedupe,
            "schema_version": SCHEMA_VERSION,
            "bytes_on_disk": size,
            "row_cache": self._cache.stats(),
        }

    def export(self, path: str | Path, filters: Mapping[str, Any] | None = None) -> int:
        """Write the items as JSON lines (atomically); return how many."""
        from toolbox.core.atomic import atomic_write_text

        lines = []
        for item in self.items(filters):
            d = item.to_dict()
            del d["score"], d["similarity"]
            lines.append(json.dumps(d, ensure_ascii=False))
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        return len(lines)

    def close(self) -> None:
        """Flush the index and release the store."""
        if self._rows is not None and self._rows.db is not None:
            self.flush()
        self._close_handles()

    def _close_handles(self) -> None:
        if getattr(self, "_cache", None) is not None:
            self._cache.close()  # before the connection (toolbox.memory.storage.row_cache.RowCache.close)
        inner = getattr(self, "embedder", None)
        if inner is not None and hasattr(inner, "close"):
            inner.close()
        if getattr(self, "_rows", None) is not None:
            self._rows.close()
            self._rows = None
        if getattr(self, "_lock", None) is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None

    def __enter__(self) -> EpisodicMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten close still releases the lock (not the snapshot)
        try:
            if getattr(self, "_lock", None) is not None:
                self._close_handles()
        except Exception:
            pass
