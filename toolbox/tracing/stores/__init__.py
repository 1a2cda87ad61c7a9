"""Trace stores behind one interface: JSONL (append-only) and SQLite (indexed, several writers)."""

from toolbox.tracing.stores.base import MemoryStore, Query, TraceStore, open_store

__all__ = ["MemoryStore", "Query", "TraceStore", "open_store"]
