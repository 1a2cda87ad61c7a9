"""Trace stores behind one interface: JSONL (append-only) and SQLite (indexed, several writers).

``open_store(path)`` picks the store by the file's suffix; ``base`` holds the interface and the
in-memory store, ``jsonl`` and ``sqlite`` the two file stores (imported only when opened).
"""

from __future__ import annotations

from pathlib import Path

from toolbox.tracing.record import TraceError
from toolbox.tracing.stores.base import MemoryStore, Query, TraceStore

__all__ = ["MemoryStore", "Query", "TraceStore", "open_store"]


def open_store(path: str | Path, *, readonly: bool = False, create: bool = True) -> TraceStore:
    """The store at ``path``: ``.jsonl`` (or ``.jsonl.gz`` is refused) a JSONL store, ``.sqlite``,
    ``.sqlite3`` or ``.db`` a SQLite store."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        from toolbox.tracing.stores.jsonl import JsonlStore

        return JsonlStore(path, readonly=readonly, create=create)
    if suffix in (".sqlite", ".sqlite3", ".db"):
        from toolbox.tracing.stores.sqlite import SqliteStore

        return SqliteStore(path, readonly=readonly, create=create)
    raise TraceError(
        f"{path}: unknown trace store type {suffix or '(no suffix)'!r}; name it *.jsonl (append-only "
        "JSON lines) or *.sqlite (indexed, several writer processes)."
    )
