"""EpisodicMemory: a crash-safe local memory store (mem0's API, Letta's archival search).

A store is a folder::

    memory.sqlite     items, their history, the pending index log, metadata keys, FTS5 text index
    index-000007/     the vector index's own files (the generation named in SQLite's meta table)
    embeddings.sqlite the embedding cache (keyed by embedder identity and text)
    lock              held (flock) while a process has the store open

SQLite is the source of truth. Every change is one SQLite transaction that writes the item rows,
their history and a *pending* row carrying the new vector (or a deletion); only after it commits is
the in-memory index changed. ``flush`` (every ``flush_every`` changes, and on ``close``) writes the
index into a fresh ``index-N`` folder, fsyncs it, then in one transaction names it current and
drops the pending rows it contains. Opening a store loads the current index and replays the
pending rows after it. A SIGKILL at any moment therefore leaves either the old or the new state of
every change, and the reopened index holds exactly the items SQLite holds.

Search ranks by cosine similarity, optionally blended (additively) with recency,
``recency_weight · 0.5 ** (age / recency_half_life)``, and with a text match,
``text_weight · bm25 / max bm25`` from SQLite FTS5, over the union of the vector and text
candidates, as Letta's hybrid archival search does. Filters are ``toolbox.memory.filters``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from toolbox.core.atomic import fsync_dir
from toolbox.core.errors import ConfigError, ToolboxError
from toolbox.memory.embedders.base import Embedder, normalize_rows
from toolbox.memory.filters import FilterError, compile_filter, dumps_metadata, json_path, to_epoch
from toolbox.memory.index.base import VectorIndex

SCHEMA_VERSION = 1
DEDUPE = ("off", "skip", "merge")
EVICTION = {
    "oldest": "timestamp ASC, id ASC",
    "lru": "COALESCE(accessed_at, created_at) ASC, id ASC",
    "importance": "importance ASC, timestamp ASC, id ASC",
}
_ITEM_COLUMNS = "id, text, metadata, timestamp, importance, created_at, updated_at, accessed_at"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    timestamp REAL NOT NULL,
    importance REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    accessed_at REAL
);
CREATE INDEX IF NOT EXISTS items_timestamp ON items (timestamp);
CREATE TABLE IF NOT EXISTS history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id INTEGER NOT NULL,
    op TEXT NOT NULL,
    text TEXT,
    metadata TEXT,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS history_item ON history (item_id);
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id INTEGER NOT NULL,
    vector BLOB
);
CREATE TABLE IF NOT EXISTS fields (name TEXT PRIMARY KEY);
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(text, content='items', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS items_fts_insert AFTER INSERT ON items BEGIN
    INSERT INTO items_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS items_fts_delete AFTER DELETE ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER IF NOT EXISTS items_fts_update AFTER UPDATE OF text ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO items_fts (rowid, text) VALUES (new.id, new.text);
END;
"""
_WORD = re.compile(r"\w+", re.UNICODE)


class MemoryStoreError(ToolboxError):
    """The store cannot be opened or changed as asked; the message names the fix."""


@dataclass
class MemoryItem:
    """One memory; ``score`` and ``similarity`` are set by ``search``."""

    id: int
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp: float = 0.0
    importance: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0
    accessed_at: float | None = None
    score: float | None = None
    similarity: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row_item(row: Sequence[Any]) -> MemoryItem:
    return MemoryItem(
        id=row[0],
        text=row[1],
        metadata=json.loads(row[2]),
        timestamp=row[3],
        importance=row[4],
        created_at=row[5],
        updated_at=row[6],
        accessed_at=row[7],
    )


def _time(value: float | str | datetime | None, now: float, what: str = "timestamp") -> float:
    if value is None:
        return now
    try:
        return to_epoch(value, what)
    except FilterError as e:
        raise ConfigError(str(e).replace("filter on", "value of")) from None


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
        flush_every: write the index snapshot after this many changes (or a tenth of the store,
            if larger); the pending log covers the changes in between.
        index_fields: metadata keys to give an SQLite expression index, so filters on them do not
            scan every row (worth it for fields filtered on often in a large store).
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
        flush_every: int = 10_000,
        index_fields: Sequence[str] = (),
    ) -> None:
        if dedupe not in DEDUPE:
            raise ConfigError(f"memory.dedupe: expected one of {', '.join(DEDUPE)}, got {dedupe!r}.")
        if eviction not in EVICTION:
            raise ConfigError(f"memory.eviction: expected one of {', '.join(EVICTION)}, got {eviction!r}.")
        if max_items is not None and max_items < 1:
            raise ConfigError(f"memory.max_items: must be at least 1 (or None), got {max_items}.")
        self.path = Path(path)
        self.dedupe, self.dedupe_threshold = dedupe, dedupe_threshold
        self.max_items, self.eviction, self.flush_every = max_items, eviction, flush_every
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = self._acquire_lock()
        self._db: sqlite3.Connection | None = None
        try:
            db_path = self.path / "memory.sqlite"
            # first an immutable read (no -wal/-shm files made): a store we refuse is left untouched
            # (it does not see a WAL that a killed process left unmerged: the second read does)
            first = self._read_meta(f"file:{db_path}?immutable=1") if db_path.exists() else None
            if first is not None or embedder is not None or not db_path.exists():
                self.embedder = self._resolve_embedder(embedder, first)
            self._db = sqlite3.connect(db_path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            meta = self._read_meta(self._db)  # the authoritative read
            if not hasattr(self, "embedder"):
                self.embedder = self._resolve_embedder(embedder, meta)
            elif meta is not None:
                self._check_embedder(meta)
            index_spec = self._resolve_index_spec(index, meta)
            if meta is None:
                self._create(index_spec)
            for name in index_fields:
                digest = hashlib.sha1(name.encode()).hexdigest()[:12]
                self._db.execute(
                    f"CREATE INDEX IF NOT EXISTS items_meta_{digest} ON items (json_extract(metadata, {json_path(name)}))"
                )
            if cache:
                from toolbox.memory.embedders.cache import CachedEmbedder

                self.embedder = CachedEmbedder(self.embedder, self.path / "embeddings.sqlite")
            self.index_spec = index_spec
            self._load_index(index_spec, meta)
            self._fields = {r[0] for r in self._db.execute("SELECT name FROM fields")}
            self._count = self._db.execute("SELECT count(*) FROM items").fetchone()[0]
            self._check_consistent()
        except BaseException:
            self._close_handles()
            raise

    # opening --------------------------------------------------------------------------------------
    def _acquire_lock(self) -> int:
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise MemoryStoreError(
                f"memory store {self.path} is open in another process; close it there first "
                "(one process writes a store at a time)."
            ) from None
        return fd

    def _read_meta(self, source: str | sqlite3.Connection) -> dict[str, str] | None:
        con = sqlite3.connect(source, uri=True) if isinstance(source, str) else source
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError:  # no meta table: a crash before the store was created
            return None
        except sqlite3.DatabaseError as e:
            raise MemoryStoreError(
                f"{self.path / 'memory.sqlite'} is not a memory store ({e}); point --store at a store folder."
            ) from None
        finally:
            if isinstance(source, str):
                con.close()
        if "schema_version" not in meta:
            return None
        version = int(meta["schema_version"])
        if version > SCHEMA_VERSION:
            raise MemoryStoreError(
                f"memory store {self.path} was written by a newer toolbox (store schema {version}; this "
                f"toolbox reads up to {SCHEMA_VERSION}); upgrade toolbox to open it. The store was not changed."
            )
        return meta

    def _resolve_embedder(self, embedder: Embedder | Mapping[str, Any] | None, meta: dict | None) -> Embedder:
        from toolbox.core.registries import EMBEDDERS

        if embedder is None:
            if meta is None:
                raise ConfigError(
                    f"memory store {self.path} is new: give an embedder (for example {{'name': 'hashing'}} "
                    "or {'name': 'minilm'})."
                )
            embedder = json.loads(meta["embedder_spec"])
            if embedder is None:
                raise ConfigError(
                    f"memory store {self.path} was made with an embedder object ({meta['embedder']}); "
                    "pass that embedder again."
                )
        if isinstance(embedder, Mapping):
            from toolbox.core.registry import _plain

            self._embedder_spec = dict(_plain(embedder))
            embedder = EMBEDDERS.build(self._embedder_spec, "memory.embedder")
        else:
            self._embedder_spec = None
        self.embedder = embedder
        if meta is not None:
            self._check_embedder(meta)
        return embedder

    def _check_embedder(self, meta: dict[str, str]) -> None:
        embedder, dim, ident = self.embedder, int(meta["dim"]), meta["embedder"]
        if embedder.dim != dim:
            raise MemoryStoreError(
                f"embedder {embedder.identity} makes {embedder.dim}-dimensional vectors, but memory store "
                f"{self.path} holds {dim}-dimensional ones from {ident}. Open it with that embedder, or "
                "export it (toolbox memory export) and add the items into a new store. The store was not changed."
            )
        if embedder.identity != ident:
            raise MemoryStoreError(
                f"memory store {self.path} holds vectors from {ident}, not from {embedder.identity}: "
                "their similarities would be meaningless. Open it with that embedder, or export it "
                "(toolbox memory export) and add the items into a new store. The store was not changed."
            )

    def _resolve_index_spec(self, index: Mapping[str, Any] | str | None, meta: dict | None) -> dict[str, Any]:
        from toolbox.core.registries import VECTOR_INDEXES
        from toolbox.core.registry import _plain

        if index is None:
            spec = json.loads(meta["index_spec"]) if meta else {"name": "exact"}
        elif isinstance(index, str):
            spec = {"name": index}
        else:
            spec = dict(_plain(index))
        VECTOR_INDEXES.validate(spec, "memory.index", frozenset({"dim"}))
        return spec

    def _create(self, index_spec: dict[str, Any]) -> None:
        assert self._db is not None
        self._db.executescript(_SCHEMA)  # idempotent; the store exists once its meta rows commit
        with self._transaction() as db:
            meta = {
                "schema_version": str(SCHEMA_VERSION),
                "dim": str(self.embedder.dim),
                "embedder": self.embedder.identity,
                "embedder_spec": json.dumps(self._embedder_spec, sort_keys=True),
                "index_spec": json.dumps(index_spec, sort_keys=True),
                "index_gen": "0",
                "index_seq": "0",
                "created_at": repr(time.time()),
            }
            db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(meta.items()))

    def _meta(self, key: str) -> str:
        assert self._db is not None
        return self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]

    def _index_folder(self, gen: int) -> Path:
        return self.path / f"index-{gen:06d}"

    def _load_index(self, spec: dict[str, Any], meta: dict | None) -> VectorIndex:
        from toolbox.core.registries import VECTOR_INDEXES

        dim = self.embedder.dim
        self._gen = int(self._meta("index_gen"))
        self._snap_seq = self._applied_seq = int(self._meta("index_seq"))
        stored_spec = json.loads(self._meta("index_spec"))
        if self._gen > 0:
            settings = {k: v for k, v in stored_spec.items() if k != "name"}
            self.index = VECTOR_INDEXES.get(stored_spec["name"]).load(
                self._index_folder(self._gen), dim, **settings
            )
        else:
            self.index = VECTOR_INDEXES.build(stored_spec, "memory.index", dim=dim)
        self._replay()
        self._remove_stale_folders()
        if spec != stored_spec:  # another index kind or settings: copy the vectors over, then snapshot
            new = VECTOR_INDEXES.build(spec, "memory.index", dim=dim)
            ids = self.index.ids()
            for start in range(0, len(ids), 50_000):
                chunk = ids[start : start + 50_000]
                new.add(chunk, self.index.get(chunk))
            self.index = new
            self._snapshot(index_spec=spec)
        return self.index

    def _replay(self) -> None:
        """Apply the pending rows written after the loaded snapshot (the crash-recovery path)."""
        assert self._db is not None
        rows = self._db.execute(
            "SELECT seq, item_id, vector FROM pending WHERE seq > ? ORDER BY seq", (self._applied_seq,)
        )
        for seq, item_id, vector in rows:
            ids = np.array([item_id], dtype=np.int64)
            if vector is None:
                self.index.remove(ids)
            else:
                self.index.add(ids, np.frombuffer(vector, dtype=np.float32)[None, :])
            self._applied_seq = seq

    def _remove_stale_folders(self) -> None:
        """Index folders other than the current one: a crash left them, nothing reads them."""
        current = self._index_folder(self._gen).name
        for p in self.path.iterdir():
            if (
                p.is_dir()
                and (p.name.startswith("index-") or p.name.startswith(".index-"))
                and p.name != current
            ):
                shutil.rmtree(p, ignore_errors=True)

    def _check_consistent(self) -> None:
        if len(self.index) != self._count:
            raise MemoryStoreError(
                f"memory store {self.path}: the index holds {len(self.index)} vectors but SQLite "
                f"{self._count} items; run `toolbox memory stats --store {self.path} --check` for details."
            )

    # transactions ---------------------------------------------------------------------------------
    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, exc_type, exc, tb) -> None:
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")

    def _transaction(self) -> EpisodicMemory._Tx:
        if self._db is None:
            raise MemoryStoreError(f"memory store {self.path} is closed.")
        return EpisodicMemory._Tx(self._db)

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
            record = dict(text)
            unknown = set(record) - {"text", "metadata", "timestamp", "importance"}
            if "text" not in record or unknown:
                raise ConfigError(
                    "a memory record is {'text': ..., 'metadata': {...}, 'timestamp': ..., 'importance': ...}"
                    + (f"; unknown keys: {', '.join(sorted(unknown))}" if unknown else "; 'text' is missing")
                )
            text = record["text"]
            metadata = record.get("metadata", metadata)
            timestamp = record.get("timestamp", timestamp)
            importance = record.get("importance", importance)
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
        n = len(texts)
        metadatas = list(metadatas) if metadatas is not None else [None] * n
        timestamps = list(timestamps) if timestamps is not None else [None] * n
        importances = list(importances) if importances is not None else [0.0] * n
        if not (len(metadatas) == len(timestamps) == len(importances) == n):
            raise ConfigError(
                "add_many: texts, metadatas, timestamps and importances must have the same length."
            )
        for t in texts:
            if not isinstance(t, str) or not t.strip():
                raise ConfigError(f"a memory's text must be a non-empty string, got {t!r}.")
        now = time.time()
        meta_json = [dumps_metadata(m) for m in metadatas]
        stamps = [_time(t, now) for t in timestamps]
        importances = [float(x) for x in importances]
        if vectors is None:
            vectors = self.embedder.embed(list(texts))
        else:
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.shape != (n, self.embedder.dim):
                raise ConfigError(
                    f"add_many: vectors must have shape ({n}, {self.embedder.dim}), got {vectors.shape}."
                )
            vectors = normalize_rows(vectors)
        duplicate_of = self._duplicates(vectors) if self.dedupe != "off" else [None] * n
        keys = {k for m in metadatas for k in (m or {})}
        ids: list[int] = [0] * n
        merged: list[int] = []
        with self._transaction() as db:
            row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'items'").fetchone()
            next_id = (row[0] if row else 0) + 1
            new_rows, history, pending, new_idx = [], [], [], []
            for i in range(n):
                dup = duplicate_of[i]
                if dup is not None:
                    ids[i] = ids[dup[1]] if dup[0] == "batch" else dup[1]
                    continue
                ids[i] = next_id
                next_id += 1
                new_idx.append(i)
                new_rows.append((ids[i], texts[i], meta_json[i], stamps[i], importances[i], now, now))
                history.append((ids[i], "add", texts[i], meta_json[i], now))
                pending.append((ids[i], vectors[i].tobytes()))
            db.executemany(
                "INSERT INTO items (id, text, metadata, timestamp, importance, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                new_rows,
            )
            if self.dedupe == "merge":
                for i in range(n):
                    if duplicate_of[i] is not None:
                        self._merge(db, ids[i], texts[i], metadatas[i], stamps[i], importances[i], now)
                        merged.append(ids[i])
            db.executemany(
                "INSERT INTO history (item_id, op, text, metadata, at) VALUES (?, ?, ?, ?, ?)", history
            )
            first_seq = self._log(db, pending)
            db.executemany("INSERT OR IGNORE INTO fields (name) VALUES (?)", [(k,) for k in sorted(keys)])
            evicted = self._evict(db, self._count + len(new_rows), now)
        # committed: now the in-memory state follows
        self._fields |= keys
        if new_idx:
            self.index.add(np.array([ids[i] for i in new_idx], dtype=np.int64), vectors[new_idx])
        self._count += len(new_rows)
        self._applied(first_seq, len(pending))
        if evicted:
            self.index.remove(np.array(evicted, dtype=np.int64))
            self._count -= len(evicted)
            self._applied_seq = self._last_seq()
        self._maybe_flush()
        return ids

    def _duplicates(self, vectors: np.ndarray) -> list[tuple[str, int] | None]:
        """For each new vector: ("store", id) or ("batch", earlier position) of a duplicate, or None."""
        out: list[tuple[str, int] | None] = []
        if len(self.index):
            best_ids, best = self.index.search(vectors, 1)
        else:
            best_ids, best = np.full((len(vectors), 1), -1), np.full((len(vectors), 1), -np.inf)
        kept: list[int] = []
        for i, v in enumerate(vectors):
            hit: tuple[str, int] | None = None
            if best[i, 0] >= self.dedupe_threshold:
                hit = ("store", int(best_ids[i, 0]))
            elif kept:
                sims = vectors[kept] @ v
                j = int(np.argmax(sims))
                if sims[j] >= self.dedupe_threshold:
                    hit = ("batch", kept[j])
            if hit is None:
                kept.append(i)
            out.append(hit)
        return out

    def _merge(self, db, item_id, text, metadata, timestamp, importance, now) -> None:
        row = db.execute(
            "SELECT metadata, timestamp, importance FROM items WHERE id = ?", (item_id,)
        ).fetchone()
        merged = {**json.loads(row[0]), **(metadata or {})}
        meta_json = dumps_metadata(merged)
        db.execute(
            "UPDATE items SET metadata = ?, timestamp = ?, importance = ?, updated_at = ? WHERE id = ?",
            (meta_json, max(row[1], timestamp), max(row[2], importance), now, item_id),
        )
        db.execute(
            "INSERT INTO history (item_id, op, text, metadata, at) VALUES (?, 'merge', ?, ?, ?)",
            (item_id, text, meta_json, now),
        )

    def _log(self, db: sqlite3.Connection, pending: list[tuple[int, bytes | None]]) -> int:
        """Write pending index rows; return the seq of the first one."""
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'pending'").fetchone()
        first = (row[0] if row else 0) + 1
        db.executemany(
            "INSERT INTO pending (seq, item_id, vector) VALUES (?, ?, ?)",
            [(first + j, item_id, vec) for j, (item_id, vec) in enumerate(pending)],
        )
        return first

    def _applied(self, first_seq: int, count: int) -> None:
        if count:
            self._applied_seq = first_seq + count - 1

    def _last_seq(self) -> int:
        assert self._db is not None
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'pending'").fetchone()
        return row[0] if row else 0

    def _evict(self, db: sqlite3.Connection, count: int, now: float) -> list[int]:
        if self.max_items is None or count <= self.max_items:
            return []
        victims = [
            r[0]
            for r in db.execute(
                f"SELECT id FROM items ORDER BY {EVICTION[self.eviction]} LIMIT ?", (count - self.max_items,)
            )
        ]
        self._delete_rows(db, victims, "evict", now)
        return victims

    def _delete_rows(self, db: sqlite3.Connection, ids: list[int], op: str, now: float) -> None:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            db.execute(
                f"INSERT INTO history (item_id, op, text, metadata, at) "
                f"SELECT id, ?, text, metadata, ? FROM items WHERE id IN ({marks}) ORDER BY id",
                (op, now, *chunk),
            )
            db.execute(f"DELETE FROM items WHERE id IN ({marks})", chunk)
        self._log(db, [(i, None) for i in ids])

    # reading --------------------------------------------------------------------------------------
    def get(self, item_id: int) -> MemoryItem | None:
        """The item with this id, or None."""
        assert self._db is not None
        row = self._db.execute(f"SELECT {_ITEM_COLUMNS} FROM items WHERE id = ?", (int(item_id),)).fetchone()
        if row is None:
            return None
        if self.eviction == "lru":
            self._touch([row[0]])
        return _row_item(row)

    def _touch(self, ids: list[int]) -> None:
        with self._transaction() as db:
            now = time.time()
            db.executemany("UPDATE items SET accessed_at = ? WHERE id = ?", [(now, i) for i in ids])

    def __len__(self) -> int:
        return self._count

    @property
    def fields(self) -> set[str]:
        """The metadata keys of the items added so far (what filters may name besides the columns)."""
        return set(self._fields)

    def where(self, filters: Mapping[str, Any] | None) -> list[int]:
        """The ids of every item matching ``filters`` (ascending)."""
        assert self._db is not None
        sql, params = compile_filter(filters, self._fields)
        return [r[0] for r in self._db.execute(f"SELECT id FROM items WHERE {sql} ORDER BY id", params)]

    def items(self, filters: Mapping[str, Any] | None = None) -> Iterator[MemoryItem]:
        """Every item matching ``filters``, in id order."""
        assert self._db is not None
        sql, params = compile_filter(filters, self._fields)
        for row in self._db.execute(f"SELECT {_ITEM_COLUMNS} FROM items WHERE {sql} ORDER BY id", params):
            yield _row_item(row)

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
            filters: a metadata filter (``toolbox.memory.filters``); only matching items rank.
            recency_half_life: seconds after which an item's recency bonus halves (None: no bonus).
            recency_weight: the weight of the recency bonus (0..1 added to the similarity).
            text_weight: the weight of the FTS5 BM25 text match, normalised to 0..1 (0: off).
            min_score: drop items whose cosine similarity is below this.
            now: the time recency is measured from (default: now).
        """
        assert self._db is not None
        if k < 1:
            raise ConfigError(f"search: k must be at least 1, got {k}.")
        if isinstance(query, str):
            qv = self.embedder.embed([query])
        else:
            qv = normalize_rows(np.asarray(query, dtype=np.float32).reshape(1, -1))
            if qv.shape[1] != self.embedder.dim:
                raise ConfigError(
                    f"search: the query vector has {qv.shape[1]} dimensions, the store {self.embedder.dim}."
                )
        blend = recency_half_life is not None or (text_weight > 0 and isinstance(query, str))
        n_cand = max(4 * k, 50) if blend else k
        cand = self._vector_candidates(qv, n_cand, filters)
        if cand is None:
            return []
        text_scores: dict[int, float] = {}
        if text_weight > 0 and isinstance(query, str):
            text_scores = self._text_match(query, n_cand, filters)
            extra = [i for i in text_scores if i not in cand]
            if extra:
                extra_sims = self.index.get(np.array(extra, dtype=np.int64)) @ qv[0]
                cand.update(zip(extra, extra_sims.tolist(), strict=True))
        if min_score is not None:
            cand = {i: s for i, s in cand.items() if s >= min_score}
        if not cand:
            return []
        rows = self._rows(list(cand))
        now = time.time() if now is None else now
        scored = []
        for item in rows:
            item.similarity = cand[item.id]
            score = item.similarity
            if recency_half_life is not None:
                age = max(0.0, now - item.timestamp)
                score += recency_weight * 0.5 ** (age / recency_half_life)
            if text_scores:
                score += text_weight * text_scores.get(item.id, 0.0)
            item.score = score
            scored.append(item)
        scored.sort(key=lambda it: (-it.score, it.id))
        out = scored[:k]
        if self.eviction == "lru" and out:
            self._touch([it.id for it in out])
        return out

    def _vector_candidates(
        self, qv: np.ndarray, n: int, filters: Mapping[str, Any] | None
    ) -> dict[int, float] | None:
        """The ``n`` best ``{id: similarity}`` among the items ``filters`` allows (None: none allowed).

        A filter matching at most the index's ``exact_below`` items is searched exactly over them. A
        broader one (an approximate index) searches the whole graph for more candidates than needed
        and keeps those SQLite says match, widening 4× until ``n`` survive (when none is left to
        widen to, the allowed ids are handed to the index); it never materialises the allowed ids.
        """
        assert self._db is not None
        if not filters:
            ids, sims = self.index.search(qv, n)
            return {i: s for i, s in zip(ids[0].tolist(), sims[0].tolist(), strict=True) if i >= 0}
        sql, params = compile_filter(filters, self._fields)
        limit = getattr(self.index, "exact_below", None)
        matching = self._db.execute(f"SELECT count(*) FROM items WHERE {sql}", params).fetchone()[0]
        if matching == 0:
            return None
        if limit is not None and matching > limit:
            want = min(self._count, max(2 * n * self._count // matching, 4 * n))
            while True:
                ids, sims = self.index.search(qv, want)
                found = {i: s for i, s in zip(ids[0].tolist(), sims[0].tolist(), strict=True) if i >= 0}
                keep = self._matching(list(found), sql, params)
                if len(keep) >= min(n, matching) or want >= self._count:
                    best = sorted(keep, key=lambda i: -found[i])[:n]
                    return {i: found[i] for i in best}
                want = min(self._count, 4 * want)
                if want > 4096:  # too sparse among the nearest: let the index walk with the filter
                    break
        allowed = np.array(self.where(filters), dtype=np.int64)
        ids, sims = self.index.search(qv, n, allowed)
        return {i: s for i, s in zip(ids[0].tolist(), sims[0].tolist(), strict=True) if i >= 0}

    def _matching(self, ids: list[int], sql: str, params: list[Any]) -> list[int]:
        """The ids among ``ids`` that match the compiled filter."""
        assert self._db is not None
        out: list[int] = []
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = self._db.execute(
                f"SELECT id FROM items WHERE id IN ({','.join('?' * len(chunk))}) AND ({sql})",
                (*chunk, *params),
            )
            out.extend(r[0] for r in rows)
        return out

    def _rows(self, ids: list[int]) -> list[MemoryItem]:
        assert self._db is not None
        out = []
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            out.extend(
                _row_item(r)
                for r in self._db.execute(
                    f"SELECT {_ITEM_COLUMNS} FROM items WHERE id IN ({','.join('?' * len(chunk))})", chunk
                )
            )
        return out

    def _text_match(self, query: str, n: int, filters: Mapping[str, Any] | None) -> dict[int, float]:
        """FTS5 BM25 of the query's words (ORed), normalised so the best match scores 1."""
        assert self._db is not None
        words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
        if not words:
            return {}
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        sql = "SELECT rowid, -bm25(items_fts) FROM items_fts WHERE items_fts MATCH ?"
        params: list[Any] = [match]
        if filters:
            where, fparams = compile_filter(filters, self._fields)
            sql += f" AND rowid IN (SELECT id FROM items WHERE {where})"
            params += fparams
        rows = self._db.execute(sql + " ORDER BY bm25(items_fts) LIMIT ?", (*params, n)).fetchall()
        if not rows:
            return {}
        best = max(r[1] for r in rows) or 1.0
        return {int(r[0]): float(r[1]) / best for r in rows}

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
        assert self._db is not None
        old = self._db.execute(f"SELECT {_ITEM_COLUMNS} FROM items WHERE id = ?", (int(item_id),)).fetchone()
        if old is None:
            raise KeyError(f"no memory item with id {item_id}")
        item = _row_item(old)
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise ConfigError(f"a memory's text must be a non-empty string, got {text!r}.")
        now = time.time()
        new_text = item.text if text is None else text
        new_meta = item.metadata if metadata is None else dict(metadata)
        meta_json = dumps_metadata(new_meta)
        new_time = item.timestamp if timestamp is None else _time(timestamp, now)
        new_importance = item.importance if importance is None else float(importance)
        vector = self.embedder.embed([new_text])[0] if new_text != item.text else None
        with self._transaction() as db:
            db.execute(
                "UPDATE items SET text = ?, metadata = ?, timestamp = ?, importance = ?, updated_at = ? WHERE id = ?",
                (new_text, meta_json, new_time, new_importance, now, item.id),
            )
            db.execute(
                "INSERT INTO history (item_id, op, text, metadata, at) VALUES (?, 'update', ?, ?, ?)",
                (item.id, new_text, meta_json, now),
            )
            if vector is not None:
                first = self._log(db, [(item.id, vector.tobytes())])
            db.executemany("INSERT OR IGNORE INTO fields (name) VALUES (?)", [(k,) for k in sorted(new_meta)])
        self._fields |= set(new_meta)
        if vector is not None:
            self.index.add(np.array([item.id], dtype=np.int64), vector[None, :])
            self._applied(first, 1)
        self._maybe_flush()
        return self.get(item.id)  # type: ignore[return-value]

    def delete(self, item_id: int) -> bool:
        """Delete one item; False if there was none with this id."""
        assert self._db is not None
        if self._db.execute("SELECT 1 FROM items WHERE id = ?", (int(item_id),)).fetchone() is None:
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
        with self._transaction() as db:
            self._delete_rows(db, ids, op, time.time())
        self.index.remove(np.array(ids, dtype=np.int64))
        self._count -= len(ids)
        self._applied_seq = self._last_seq()
        self._maybe_flush()

    def history(self, item_id: int) -> list[dict[str, Any]]:
        """Every change of an item, oldest first: ``{seq, op, text, metadata, at}``.

        ``op`` is ``add``, ``update``, ``merge`` (a deduplicated add), ``delete`` or ``evict``.
        """
        assert self._db is not None
        rows = self._db.execute(
            "SELECT seq, op, text, metadata, at FROM history WHERE item_id = ? ORDER BY seq", (int(item_id),)
        )
        return [
            {"seq": s, "op": op, "text": t, "metadata": json.loads(m) if m else None, "at": at}
            for s, op, t, m, at in rows
        ]

    # persistence ----------------------------------------------------------------------------------
    def _maybe_flush(self) -> None:
        if self._applied_seq - self._snap_seq >= max(self.flush_every, self._count // 10):
            self.flush()

    def flush(self) -> None:
        """Write the index snapshot and drop the pending rows it now contains."""
        if self._applied_seq == self._snap_seq and self._gen > 0:
            return
        self._snapshot()

    def _snapshot(self, index_spec: dict[str, Any] | None = None) -> None:
        gen = self._gen + 1
        final = self._index_folder(gen)
        tmp = self.path / f".index-{gen:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        self.index.save(tmp)
        fsync_dir(tmp)
        os.replace(tmp, final)
        fsync_dir(self.path)
        with self._transaction() as db:
            updates = [("index_gen", str(gen)), ("index_seq", str(self._applied_seq))]
            if index_spec is not None:
                updates.append(("index_spec", json.dumps(index_spec, sort_keys=True)))
            db.executemany("UPDATE meta SET value = ? WHERE key = ?", [(v, k) for k, v in updates])
            db.execute("DELETE FROM pending WHERE seq <= ?", (self._applied_seq,))
        old, self._gen, self._snap_seq = self._gen, gen, self._applied_seq
        if old > 0:
            shutil.rmtree(self._index_folder(old), ignore_errors=True)

    def check(self) -> dict[str, Any]:
        """Compare the index with SQLite: ``{"items", "vectors", "missing", "extra", "ok"}``."""
        assert self._db is not None
        rows = {r[0] for r in self._db.execute("SELECT id FROM items")}
        vecs = set(self.index.ids().tolist())
        return {
            "items": len(rows),
            "vectors": len(vecs),
            "missing": sorted(rows - vecs)[:20],
            "extra": sorted(vecs - rows)[:20],
            "ok": rows == vecs,
        }

    def stats(self) -> dict[str, Any]:
        assert self._db is not None
        oldest, newest = self._db.execute("SELECT min(timestamp), max(timestamp) FROM items").fetchone()
        size = sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
        return {
            "path": str(self.path),
            "items": self._count,
            "dim": self.embedder.dim,
            "embedder": self.embedder.identity,
            "index": self.index_spec,
            "index_generation": self._gen,
            "pending": self._applied_seq - self._snap_seq,
            "history_rows": self._db.execute("SELECT count(*) FROM history").fetchone()[0],
            "fields": sorted(self._fields),
            "oldest": oldest,
            "newest": newest,
            "max_items": self.max_items,
            "eviction": self.eviction,
            "dedupe": self.dedupe,
            "schema_version": SCHEMA_VERSION,
            "bytes_on_disk": size,
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
        if self._db is not None:
            self.flush()
        self._close_handles()

    def _close_handles(self) -> None:
        inner = getattr(self, "embedder", None)
        if inner is not None and hasattr(inner, "close"):
            inner.close()
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock is not None:
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
