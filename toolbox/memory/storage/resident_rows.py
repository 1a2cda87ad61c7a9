"""Every item row in memory, compactly: what a search returns without a SQLite read.

Why: a search's hits are a handful of random rows. Read from SQLite (one prepared
``id IN (...)`` statement) they cost 15-25 us at 100k items on an idle core, and with the
``MemoryItem``\\ s built from them ~38 us: a quarter of the bare hnswlib call at ef 64, which makes
the store 1.3-1.5x that call, where the goal is 1.2x. A bounded cache of recent rows
(``toolbox.memory.storage.row_cache``) helps only when searches return the same items again, which fresh
questions to a large store rarely do. This copy holds every row, so no search reads SQLite; SQLite
stays the source of truth and the copy is rebuilt from it whenever it could differ.

Layout: numpy columns indexed by slot: the texts and the metadata JSON strings (object arrays of
Python strings; equal metadata strings are shared, as stores repeat a few metadata values) and a
float64 row of ``timestamp, importance, created_at, updated_at, accessed_at`` (NaN: None); and
``slot_of``, an int32 array indexed by item id (0, an empty slot: not held; ids past its end read
it clipped to its last entry, always 0), so 4 bytes per id up to the largest
(ids are never reused: a store that has seen 100M adds holds 400 MB there, like the index's own
label array). Freed slots are reused. A search's rows are three numpy gathers, not a dozen Python
dict and list lookups per hit, and no test for a miss before the loop that builds the items: right after the graph walk every lookup is a cache miss (~0.8 us for a dict
lookup at 100k items here), and a gather issues its loads together. ``benchmarks/memory.py`` reports its memory at 100k and 1M
items (``resident_rows_mib``); the vector index holds 3 KB per item at dimension 384 for comparison.

Filled lazily: the first search reads every row in one scan (~0.3 s per 100k items), so a store
opened to add, inspect or export never pays it.

What keeps it from ever differing from SQLite (the rules of ``toolbox.memory.storage.row_cache``):

- The store forgets the ids it changes (update, delete, delete_where, eviction, a merged
  duplicate) *before* the change's transaction commits, inside the same call; a forgotten row is
  read from SQLite when a search next returns it. An add's new rows are put in *after* its commit
  (``added``): an exception in between leaves them out, and they are read when asked for.
  ``touched`` (the ``lru`` clock) rewrites ``accessed_at`` before SQLite does, and the store forgets
  the rows if that write fails.
- Another SQLite connection's commit (``toolbox.memory.storage.commit_watch``) drops the whole copy; the
  next search rebuilds it.
- A reopened store starts empty (the copy lives in the store object).

Each answer is a fresh ``MemoryItem`` (a caller may change it without touching the copy).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from toolbox.memory.storage.commit_watch import CommitWatcher
from toolbox.memory.storage.row_store import ITEM_COLUMNS, MemoryItem, RowStore

_new_item = object.__new__
_SHARE_BELOW = 256  # metadata JSON strings shorter than this are shared between equal items
_SHARED_MAX = 65_536  # at most this many distinct shared strings (then new ones are kept as they are)


class ResidentRows:
    """Every row of ``rows``' items, loaded at the first lookup and kept in step by the store."""

    size = None  # no bound (``RowCache.size`` is the bounded cache's)

    def __init__(self, rows: RowStore) -> None:
        self.rows = rows
        self._watch = CommitWatcher(rows)
        self.hits = self.misses = self.loads = 0
        self._empty()

    def _empty(self) -> None:
        self.loaded = False
        self._slot_of = np.zeros(1024, dtype=np.int32)
        self._text = np.full(1, None, dtype=object)  # slot 0: empty (text None: not held)
        self._meta = np.full(1, None, dtype=object)
        self._num = np.full((1, 5), np.nan, dtype=np.float64)
        self._used, self._held = 1, 0  # slots ever handed out (slot 0 included), rows held
        self._free: list[int] = []
        self._shared: dict[str, str] = {}

    def __len__(self) -> int:
        return self._held

    def __contains__(self, item_id: int) -> bool:
        return 0 <= item_id < len(self._slot_of) and self._slot_of[item_id] > 0

    # filling --------------------------------------------------------------------------------------
    def _load(self) -> None:
        """Every row of SQLite, in one scan (after ``_empty``)."""
        assert self.rows.db is not None
        cursor = self.rows.db.execute(f"SELECT {ITEM_COLUMNS} FROM items ORDER BY id")
        while rows := cursor.fetchmany(20_000):
            self._put(rows)
        self.loaded = True
        self.loads += 1

    def _put(self, rows: Sequence[Sequence[Any]]) -> None:
        """Store rows of ``ITEM_COLUMNS`` (ids not held yet) in free slots, then new ones."""
        ids, texts, metas, *nums = zip(*rows, strict=True)
        n = len(ids)
        shared, share = self._shared, self._share
        reuse = min(len(self._free), n)
        slots = np.empty(n, dtype=np.int64)
        if reuse:
            slots[:reuse] = self._free[-reuse:]
            del self._free[-reuse:]
        slots[reuse:] = np.arange(self._used, self._used + n - reuse)
        self._used += n - reuse
        if self._used > len(self._num):
            cap = max(self._used, 2 * len(self._num), 1024)
            for name in ("_text", "_meta", "_num"):
                old = getattr(self, name)
                grown = np.empty((cap, *old.shape[1:]), dtype=old.dtype)
                grown[: len(old)] = old
                setattr(self, name, grown)
        column = np.empty(n, dtype=object)  # strings assigned one by one, never split up
        column[:] = texts
        self._text[slots] = column
        column[:] = [shared.get(m) or share(m) for m in metas]
        self._meta[slots] = column
        self._num[slots] = np.array(nums, dtype=np.float64).T  # None (never accessed) -> NaN
        id_array = np.array(ids, dtype=np.int64)
        largest = int(id_array.max())
        if largest + 1 >= len(self._slot_of):  # the last entry stays 0: clipped ids read "not held"
            grown = np.zeros(max(largest + 2, 2 * len(self._slot_of)), dtype=np.int32)
            grown[: len(self._slot_of)] = self._slot_of
            self._slot_of = grown
        self._slot_of[id_array] = slots
        self._held += n

    def _share(self, meta: str) -> str:
        if len(meta) < _SHARE_BELOW and len(self._shared) < _SHARED_MAX:
            self._shared[meta] = meta
        return meta

    def _check(self) -> None:
        """Drop everything if another connection committed; load if not loaded."""
        if self._watch.changed() and self.loaded:
            self._empty()
        if not self.loaded:
            self._load()

    # answering ------------------------------------------------------------------------------------
    def _items(self, ids: np.ndarray, sims: Sequence[float] | None) -> list[MemoryItem]:
        self._check()
        slots = self._slot_of.take(ids, mode="clip")  # past the end: the last entry, 0
        texts, metas = self._text[slots].tolist(), self._meta[slots].tolist()
        ids_list = ids.tolist()
        scores = [None] * len(ids_list) if sims is None else sims
        new, out = _new_item, []
        for i, s, text, meta, num in zip(
            ids_list, scores, texts, metas, self._num[slots].tolist(), strict=True
        ):
            if text is None:  # not held: read the rows not held from SQLite, then answer again
                return self._read_missing(ids, sims)
            item = new(MemoryItem)
            item.__dict__ = _fields(i, text, meta, num, s)
            out.append(item)
        self.hits += len(out)
        return out

    def _read_missing(self, ids: np.ndarray, sims: Sequence[float] | None) -> list[MemoryItem]:
        """``_items`` when some ids are not held (forgotten by a change, or an add's rows not put
        in): those SQLite has are read and put in; those it lacks (the index and the rows
        disagree) are left out."""
        held = self._slot_of.take(ids, mode="clip") > 0
        missing = list(dict.fromkeys(ids[~held].tolist()))
        rows = self.rows.fetch_rows(missing)
        self.misses += len(missing)
        if rows:
            self._put(rows)
        keep = self._slot_of.take(ids, mode="clip") > 0
        out = self._items(
            ids[keep], None if sims is None else [s for s, k in zip(sims, keep.tolist(), strict=True) if k]
        )
        self.hits -= len(rows)
        return out

    def fetch(self, ids: list[int]) -> list[MemoryItem]:
        """The items with these ids, in this order (ids that are gone are left out)."""
        return self._items(np.asarray(ids, dtype=np.int64), None)

    def ranked(self, ids: np.ndarray, similarities: list[float]) -> list[MemoryItem]:
        """``fetch`` with ``score`` and ``similarity`` set (a search ranked by similarity alone)."""
        return self._items(ids, similarities)

    # keeping in step ------------------------------------------------------------------------------
    def _held_slots(self, ids: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, slots)`` of those among ``ids`` that are held."""
        id_array = np.fromiter(ids, dtype=np.int64)
        slots = self._slot_of.take(id_array, mode="clip")
        return id_array[slots > 0], slots[slots > 0]

    def forget(self, ids: Iterable[int]) -> None:
        """Drop these ids (call before the transaction that changes or deletes them commits)."""
        id_array, slots = self._held_slots(ids)
        if len(slots):
            id_array, first = np.unique(id_array, return_index=True)
            slots = slots[first]
            self._slot_of[id_array] = 0
            self._text[slots] = self._meta[slots] = None
            self._free.extend(slots.tolist())
            self._held -= len(slots)

    def added(self, rows: Sequence[Sequence[Any]]) -> None:
        """Rows an add just committed: ``(id, text, metadata JSON, timestamp, importance,
        created_at, updated_at)`` (call after the commit; before the first lookup they are left
        to the load)."""
        if self.loaded and rows:
            fresh = [(*r, None) for r in rows if r[0] not in self]
            if fresh:
                self._put(fresh)

    def touched(self, ids: Iterable[int], now: float) -> None:
        """``accessed_at = now`` for the rows among ``ids`` (the ``lru`` clock moved)."""
        _, slots = self._held_slots(ids)
        self._num[slots, 4] = now

    def clear(self) -> None:
        self._empty()

    def held(self) -> dict[int, dict[str, Any]]:
        """The rows held (``id: item_fields(row)``), for tests that compare them with SQLite."""
        out = {}
        for i in np.flatnonzero(self._slot_of > 0).tolist():
            slot = int(self._slot_of[i])
            out[i] = _fields(i, self._text[slot], self._meta[slot], self._num[slot].tolist(), None)
        return out

    def stats(self) -> dict[str, Any]:
        return {
            "rows": self._held,
            "size": "all",
            "loaded": self.loaded,
            "loads": self.loads,
            "hits": self.hits,
            "misses": self.misses,
        }

    def close(self) -> None:
        """Stop watching the file (before the connection closes: ``CommitWatcher.close``)."""
        self._watch.close()
        self._empty()


def _fields(
    item_id: int, text: str, meta: str | None, num: list[float], score: float | None
) -> dict[str, Any]:
    """A ``MemoryItem``'s fields from a held row (``num``: timestamp, importance, created, updated,
    accessed; a NaN accessed time is "never")."""
    timestamp, importance, created, updated, accessed = num
    return {
        "id": item_id,
        "text": text,
        "_metadata_json": meta,
        "timestamp": timestamp,
        "importance": importance,
        "created_at": created,
        "updated_at": updated,
        "accessed_at": None if accessed != accessed else accessed,
        "score": score,
        "similarity": score,
    }
