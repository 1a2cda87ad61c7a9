"""The size limit: which items an add beyond ``max_items`` evicts.

``oldest`` evicts the smallest timestamps, ``lru`` the items least recently returned by ``get`` or
``search`` (``accessed_at``, else ``created_at``), ``importance`` the lowest importance, then the
oldest. Ties go to the smaller id. Evicted items are deleted like any other (a history row with op
``evict``, a pending deletion for the index) in the transaction of the add that overflowed.
"""

from __future__ import annotations

import sqlite3

EVICTION = {
    "oldest": "timestamp ASC, id ASC",
    "lru": "COALESCE(accessed_at, created_at) ASC, id ASC",
    "importance": "importance ASC, timestamp ASC, id ASC",
}


def victims(db: sqlite3.Connection, policy: str, count: int, max_items: int | None) -> list[int]:
    """The ids to evict so that ``count`` items fit in ``max_items`` (none if they fit)."""
    if max_items is None or count <= max_items:
        return []
    order = EVICTION[policy]
    return [r[0] for r in db.execute(f"SELECT id FROM items ORDER BY {order} LIMIT ?", (count - max_items,))]
