"""The rows a search returns, kept in memory: a bounded LRU of item rows in front of SQLite.

Why: a search's hits are a handful of random rows, and one SQLite lookup of them (a prepared
``id IN (...)`` statement, its B-tree walks and the row tuples) cost 20-35 us at 50k items, and
more right after the graph walk has evicted SQLite's code and pages from the CPU caches: as much
as everything else the store adds to the bare hnswlib call together. The items an agent's
searches return repeat (the same topics come back), so the rows returned most are answered from
memory and only the others from SQLite.

What keeps an entry from ever being stale:

- The store forgets the ids it changes (update, delete, delete_where, eviction, a merged
  duplicate) *before* the change's transaction commits, inside the same call: nothing can search
  in between (a store object is used from one thread: its SQLite connection refuses others), and
  an exception after the commit cannot leave the old row behind. ``touched`` (the ``lru`` clock)
  rewrites ``accessed_at`` in the cached rows before SQLite's, and the store forgets them if that
  write fails.
- A write by anything else (another SQLite connection's commit) empties the cache: see
  ``toolbox.memory.storage.commit_watch``.
- A reopened store starts with an empty cache (the cache lives in the store object).

Rows are kept as the instance dicts of their ``MemoryItem`` and copied into a fresh item for every
answer (a caller may change an item's metadata or score without touching the cache's copy).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import numpy as np

from toolbox.memory.storage.commit_watch import CommitWatcher
from toolbox.memory.storage.row_store import MemoryItem, RowStore, fields_item, item_fields

_new_item = object.__new__


class RowCache:
    """Up to ``size`` item rows by id, least recently returned evicted first (``size`` 0: off).

    Args:
        rows: the store's rows (the SQLite connection the cache answers for).
        size: how many rows to keep (about 0.5-1 KB each for short memories).
    """

    def __init__(self, rows: RowStore, size: int) -> None:
        if size < 0:
            raise ValueError(f"row cache size must be >= 0, got {size}")
        self.rows, self.size = rows, size
        self._rows: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._watch = CommitWatcher(rows)
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, item_id: int) -> bool:
        return item_id in self._rows

    def _check(self) -> None:
        """Empty the cache if another connection committed since the last check."""
        if self._watch.changed():
            self._rows.clear()

    def _fields(self, ids: list[int], checked: bool = False) -> list[dict[str, Any] | None]:
        """The cached field dicts of ``ids`` (None: gone), the misses read from SQLite."""
        if not checked:
            self._check()
        cached, move = self._rows, self._rows.move_to_end
        out: list[dict[str, Any] | None] = []
        missing: list[int] = []
        for i in ids:
            fields = cached.get(i)
            if fields is None:
                missing.append(i)
            else:
                move(i)
            out.append(fields)
        if missing:
            self.misses += len(missing)
            got = {row[0]: item_fields(row) for row in self.rows.fetch_rows(missing)}
            cached.update(got)
            out = [got.get(i) if f is None else f for i, f in zip(ids, out, strict=True)]
            while len(cached) > self.size:
                cached.popitem(last=False)
        self.hits += len(ids) - len(missing)
        return out

    def fetch(self, ids: list[int]) -> list[MemoryItem]:
        """The items with these ids, in this order (ids that are gone are left out)."""
        if not self.size:
            return self.rows.fetch(ids)
        return [fields_item(f) for f in self._fields(ids) if f is not None]

    def ranked(self, ids: np.ndarray | list[int], similarities: list[float]) -> list[MemoryItem]:
        """``fetch`` with ``score`` and ``similarity`` set (a search ranked by similarity alone).

        One loop over the hits, with as few Python operations as it can: it runs right after the
        graph walk, when the interpreter's own code and data have left the CPU caches.
        """
        ids = ids.tolist() if isinstance(ids, np.ndarray) else ids
        if not self.size:
            by_id = {it.id: it for it in self.rows.fetch(ids)}
            out = []
            for i, s in zip(ids, similarities, strict=True):
                item = by_id.get(i)
                if item is not None:
                    item.score = item.similarity = s
                    out.append(item)
            return out
        self._check()
        cached, move, new = self._rows, self._rows.move_to_end, _new_item
        out: list[MemoryItem] = []
        for i, s in zip(ids, similarities, strict=True):
            fields = cached.get(i)
            if fields is None:
                break
            move(i)
            item = new(MemoryItem)
            item.__dict__ = d = fields.copy()
            d["score"] = d["similarity"] = s
            out.append(item)
        n = len(out)
        self.hits += n
        if n == len(ids):
            return out
        # from the first miss on: the rows not cached read from SQLite in one statement
        rest, rest_sims = ids[n:], similarities[n:]
        missing = [i for i in rest if i not in cached]
        self.misses += len(missing)
        self.hits += len(rest) - len(missing)
        for row in self.rows.fetch_rows(missing):
            cached[row[0]] = item_fields(row)
        for i, s in zip(rest, rest_sims, strict=True):
            fields = cached.get(i)
            if fields is not None:  # None: gone from SQLite (the index and the rows disagree)
                move(i)
                item = new(MemoryItem)
                item.__dict__ = d = fields.copy()
                d["score"] = d["similarity"] = s
                out.append(item)
        while len(cached) > self.size:
            cached.popitem(last=False)
        return out

    def forget(self, ids: Iterable[int]) -> None:
        """Drop these ids (call before the transaction that changes or deletes them commits)."""
        pop = self._rows.pop
        for i in ids:
            pop(i, None)

    def clear(self) -> None:
        self._rows.clear()

    def added(self, rows: list[tuple[Any, ...]]) -> None:
        """Rows an add just committed: not cached (the cache holds what searches returned)."""

    def touched(self, ids: Iterable[int], now: float) -> None:
        """``accessed_at = now`` for the cached rows among ``ids`` (the ``lru`` clock moved)."""
        cached = self._rows
        for i in ids:
            fields = cached.get(i)
            if fields is not None:
                fields["accessed_at"] = now

    def stats(self) -> dict[str, int]:
        return {"rows": len(self._rows), "size": self.size, "hits": self.hits, "misses": self.misses}

    def held(self) -> dict[int, dict[str, Any]]:
        """The cached rows (``id: item_fields(row)``), for tests that compare them with SQLite."""
        return dict(self._rows)

    def close(self) -> None:
        """Stop watching the file (before the connection closes: ``CommitWatcher.close``)."""
        self._watch.close()
        self._rows.clear()
