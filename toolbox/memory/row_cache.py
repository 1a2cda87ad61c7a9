"""The rows a search returns, kept in memory: a bounded LRU of item rows in front of SQLite.

Why: a search's hits are a handful of random rows, and one SQLite lookup of them (a prepared
``id IN (...)`` statement, its B-tree walks and the row tuples) cost 20-35 us at 50k items, about
as much as everything else the store adds to the bare hnswlib call together; the items an
agent's searches return repeat (the same few topics come back), so the rows returned most are
answered from memory and only the others from SQLite.

What keeps an entry from ever being stale:

- The store forgets the ids it changes (update, delete, delete_where, eviction, a merged
  duplicate) *before* the change's transaction commits, inside the same call: nothing can search
  in between (a store object is used from one thread: its SQLite connection refuses others), and
  an exception after the commit cannot leave the old row behind. ``touch`` (the ``lru`` clock)
  rewrites ``accessed_at`` in the cached rows it changes.
- A write by anything else: another process cannot open the store (the folder's flock, also
  against a second store object in the same process), and a write to ``memory.sqlite`` by another
  SQLite connection changes ``PRAGMA data_version``, which every lookup compares (one statement,
  ~1 us) and which then empties the cache.
- A reopened store starts with an empty cache (the cache lives in the store object).

Rows are kept as the tuples SQLite returned and turned into a fresh ``MemoryItem`` for every
answer (a caller may change an item's metadata or score without touching the cache's copy).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from toolbox.memory.rows import MemoryItem, RowStore, row_item

_ACCESSED_AT = 7  # position of accessed_at in a row of rows.ITEM_COLUMNS


class RowCache:
    """Up to ``size`` item rows by id, least recently returned evicted first (``size`` 0: off).

    Args:
        rows: the store's rows (the SQLite connection the cache answers for).
        size: how many rows to keep (about 0.3-1 KB each for short memories).
    """

    def __init__(self, rows: RowStore, size: int) -> None:
        if size < 0:
            raise ValueError(f"row cache size must be >= 0, got {size}")
        self.rows, self.size = rows, size
        self._rows: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
        self._version = self._data_version()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, item_id: int) -> bool:
        return item_id in self._rows

    def _data_version(self) -> int:
        db = self.rows.db
        assert db is not None
        return db.execute("PRAGMA data_version").fetchone()[0]

    def fetch(self, ids: list[int]) -> list[MemoryItem]:
        """The items with these ids, in this order (ids that are gone are left out)."""
        if not self.size:
            return self.rows.fetch(ids)
        version = self._data_version()
        if version != self._version:  # another connection wrote to memory.sqlite
            self._rows.clear()
            self._version = version
        cached, move = self._rows, self._rows.move_to_end
        found: dict[int, tuple[Any, ...]] = {}
        missing = []
        for i in ids:
            row = cached.get(i)
            if row is None:
                missing.append(i)
            else:
                move(i)
                found[i] = row
        self.hits += len(found)
        if missing:
            self.misses += len(missing)
            for row in self.rows.fetch_rows(missing):
                found[row[0]] = cached[row[0]] = row
            while len(cached) > self.size:
                cached.popitem(last=False)
        return [row_item(found[i]) for i in ids if i in found]

    def forget(self, ids: Iterable[int]) -> None:
        """Drop these ids (call before the transaction that changes or deletes them commits)."""
        pop = self._rows.pop
        for i in ids:
            pop(i, None)

    def clear(self) -> None:
        self._rows.clear()

    def touched(self, ids: Iterable[int], now: float) -> None:
        """``accessed_at = now`` for the cached rows among ``ids`` (the ``lru`` clock moved)."""
        cached = self._rows
        for i in ids:
            row = cached.get(i)
            if row is not None:
                cached[i] = (*row[:_ACCESSED_AT], now, *row[_ACCESSED_AT + 1 :])

    def stats(self) -> dict[str, int]:
        return {"rows": len(self._rows), "size": self.size, "hits": self.hits, "misses": self.misses}
