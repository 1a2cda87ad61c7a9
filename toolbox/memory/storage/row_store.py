"""The SQLite side of a memory store: the schema, the item rows, their history and the FTS5 index.

``memory.sqlite`` is the store's source of truth. ``RowStore`` owns the connection and every
statement that reads or writes items; the index, its snapshots and the pending log live beside it
(``toolbox.memory.storage.recovery``). Each change runs in one ``transaction()`` (``BEGIN IMMEDIATE``).

Search reads its k hits with one statement (``fetch``): a primary-key ``IN (...)`` lookup whose SQL
depends only on the number of ids, so ``sqlite3``'s statement cache keeps it prepared, and items
whose metadata JSON is decoded only when it is read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolbox.core.errors import ToolboxError
from toolbox.memory.metadata_filters import json_path

# 2: new items enter FTS5 from ``insert`` (a per-row trigger took 1.35 s, this 0.41 s per 100k)
SCHEMA_VERSION = 2
ITEM_COLUMNS = "id, text, metadata, timestamp, importance, created_at, updated_at, accessed_at"
SCHEMA = """
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
CREATE TRIGGER IF NOT EXISTS items_fts_delete AFTER DELETE ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER IF NOT EXISTS items_fts_update AFTER UPDATE OF text ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO items_fts (rowid, text) VALUES (new.id, new.text);
END;
"""
_WORD = re.compile(r"\w+", re.UNICODE)
_CHUNK = 500  # ids per IN (...) list (SQLite's default limit is 999 variables)


@functools.cache
def _fetch_sql(n: int) -> str:
    """The row lookup of ``n`` ids (one string per ``n``: sqlite3 keeps its prepared statement)."""
    return f"SELECT {ITEM_COLUMNS} FROM items WHERE id IN ({','.join('?' * n)})"


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


def _get_metadata(item: MemoryItem) -> dict[str, Any]:
    d = item.__dict__
    if "_metadata" not in d:  # read from SQLite: the JSON is decoded on first use
        d["_metadata"] = json.loads(d.pop("_metadata_json"))
    return d["_metadata"]


def _set_metadata(item: MemoryItem, value: dict[str, Any]) -> None:
    item.__dict__.pop("_metadata_json", None)
    item.__dict__["_metadata"] = value


MemoryItem.metadata = property(_get_metadata, _set_metadata)  # type: ignore[assignment]
_NEW_ITEM = object.__new__


def item_fields(row: Sequence[Any]) -> dict[str, Any]:
    """The instance dict of the ``MemoryItem`` of a row of ``ITEM_COLUMNS`` (metadata as JSON text)."""
    return {
        "id": row[0],
        "text": row[1],
        "_metadata_json": row[2],
        "timestamp": row[3],
        "importance": row[4],
        "created_at": row[5],
        "updated_at": row[6],
        "accessed_at": row[7],
        "score": None,
        "similarity": None,
    }


def row_item(row: Sequence[Any]) -> MemoryItem:
    """A ``MemoryItem`` from a row of ``ITEM_COLUMNS`` (metadata decoded when first read)."""
    item = _NEW_ITEM(MemoryItem)
    item.__dict__ = item_fields(row)
    return item


def fields_item(fields: dict[str, Any]) -> MemoryItem:
    """A ``MemoryItem`` with a copy of ``item_fields``' dict (a dict copy: 2.5x cheaper than
    building one, which matters for the ten items of every search)."""
    item = _NEW_ITEM(MemoryItem)
    item.__dict__ = fields.copy()
    return item


class Transaction:
    """``with rows.transaction() as db:`` one ``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def read_meta(source: str | sqlite3.Connection, path: Path) -> dict[str, str] | None:
    """The store's meta table (None: no store yet), refusing a newer schema or a foreign file."""
    con = sqlite3.connect(source, uri=True) if isinstance(source, str) else source
    try:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.OperationalError:  # no meta table: a crash before the store was created
        return None
    except sqlite3.DatabaseError as e:
        raise MemoryStoreError(
            f"{path / 'memory.sqlite'} is not a memory store ({e}); point --store at a store folder."
        ) from None
    finally:
        if isinstance(source, str):
            con.close()
    if "schema_version" not in meta:
        return None
    version = int(meta["schema_version"])
    if version > SCHEMA_VERSION:
        raise MemoryStoreError(
            f"memory store {path} was written by a newer toolbox (store schema {version}; this "
            f"toolbox reads up to {SCHEMA_VERSION}); upgrade toolbox to open it. The store was not changed."
        )
    return meta


class RowStore:
    """The items, history and metadata keys of the store in folder ``path`` (``memory.sqlite``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db: sqlite3.Connection | None = sqlite3.connect(path / "memory.sqlite", isolation_level=None)
        # new stores (old ones keep theirs): a 100k fill's pending vectors cost 0.8 s less than at 4 KiB
        self.db.execute("PRAGMA page_size=16384")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
        self.db.execute("PRAGMA cache_size=-65536")  # up to 64 MiB of pages (default 2 MiB): search hits

    def read_meta(self) -> dict[str, str] | None:
        assert self.db is not None
        return read_meta(self.db, self.path)

    def create(self, meta: Mapping[str, str]) -> None:
        """Make the tables and write the meta rows (the store exists once they commit)."""
        assert self.db is not None
        self.db.executescript(SCHEMA)  # idempotent
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(meta.items()))

    def migrate(self, version: int) -> None:
        """Bring a store of schema ``version`` (older than this toolbox's) to ``SCHEMA_VERSION``."""
        with self.transaction() as db:
            if version < 2:  # version 1 indexed new items' text with a trigger
                db.execute("DROP TRIGGER IF EXISTS items_fts_insert")
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    def meta(self, key: str) -> str:
        assert self.db is not None
        return self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]

    def index_field(self, name: str) -> None:
        """An expression index on metadata key ``name``: its value and its JSON type, the two
        expressions a compiled filter tests, so counting or listing the matches reads the index
        only (with the value alone, each match read its row for the type: 0.2 s per 100k items)."""
        assert self.db is not None
        digest, path = hashlib.sha1(name.encode()).hexdigest()[:12], json_path(name)
        self.db.execute(f"DROP INDEX IF EXISTS items_meta_{digest}")  # the value-only index of before
        self.db.execute(
            f"CREATE INDEX IF NOT EXISTS items_meta2_{digest} "
            f"ON items (json_extract(metadata, {path}), json_type(metadata, {path}))"
        )

    def transaction(self) -> Transaction:
        if self.db is None:
            raise MemoryStoreError(f"memory store {self.path} is closed.")
        return Transaction(self.db)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    # reading --------------------------------------------------------------------------------------
    def count(self, where: str = "1", params: Sequence[Any] = (), upto: int | None = None) -> int:
        """How many items match, counting no further than ``upto`` (None: all)."""
        assert self.db is not None
        if upto is None:
            return self.db.execute(f"SELECT count(*) FROM items WHERE {where}", params).fetchone()[0]
        sql = f"SELECT count(*) FROM (SELECT 1 FROM items WHERE {where} LIMIT ?)"
        return self.db.execute(sql, (*params, upto)).fetchone()[0]

    def fields(self) -> set[str]:
        assert self.db is not None
        return {r[0] for r in self.db.execute("SELECT name FROM fields")}

    def get(self, item_id: int) -> MemoryItem | None:
        assert self.db is not None
        row = self.db.execute(f"SELECT {ITEM_COLUMNS} FROM items WHERE id = ?", (item_id,)).fetchone()
        return None if row is None else row_item(row)

    def exists(self, item_id: int) -> bool:
        assert self.db is not None
        return self.db.execute("SELECT 1 FROM items WHERE id = ?", (item_id,)).fetchone() is not None

    def fetch(self, ids: list[int]) -> list[MemoryItem]:
        """The items with these ids (in SQLite's order; ids that are gone are left out)."""
        return list(map(row_item, self.fetch_rows(ids)))

    def fetch_rows(self, ids: list[int]) -> list[tuple[Any, ...]]:
        """The rows (``ITEM_COLUMNS``) with these ids, in SQLite's order; ids that are gone are left out."""
        assert self.db is not None
        execute, out = self.db.execute, []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            out.extend(execute(_fetch_sql(len(chunk)), chunk).fetchall())
        return out

    def where(self, where: str, params: Sequence[Any]) -> list[int]:
        """The ids of the items matching a compiled filter, ascending."""
        assert self.db is not None
        return [r[0] for r in self.db.execute(f"SELECT id FROM items WHERE {where} ORDER BY id", params)]

    def items(self, where: str, params: Sequence[Any]) -> Iterator[MemoryItem]:
        assert self.db is not None
        for row in self.db.execute(f"SELECT {ITEM_COLUMNS} FROM items WHERE {where} ORDER BY id", params):
            yield row_item(row)

    def matching(self, ids: list[int], where: str, params: Sequence[Any]) -> list[int]:
        """The ids among ``ids`` that match the compiled filter."""
        assert self.db is not None
        out: list[int] = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            rows = self.db.execute(
                f"SELECT id FROM items WHERE id IN ({','.join('?' * len(chunk))}) AND ({where})",
                (*chunk, *params),
            )
            out.extend(r[0] for r in rows)
        return out

    def text_match(self, query: str, n: int, where: tuple[str, list[Any]] | None) -> dict[int, float]:
        """FTS5 BM25 of the query's words (ORed), normalised so the best match scores 1."""
        assert self.db is not None
        words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
        if not words:
            return {}
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        sql = "SELECT rowid, -bm25(items_fts) FROM items_fts WHERE items_fts MATCH ?"
        params: list[Any] = [match]
        if where is not None:
            sql += f" AND rowid IN (SELECT id FROM items WHERE {where[0]})"
            params += where[1]
        rows = self.db.execute(sql + " ORDER BY bm25(items_fts) LIMIT ?", (*params, n)).fetchall()
        if not rows:
            return {}
        best = max(r[1] for r in rows) or 1.0
        return {int(r[0]): float(r[1]) / best for r in rows}

    def history(self, item_id: int) -> list[dict[str, Any]]:
        assert self.db is not None
        rows = self.db.execute(
            "SELECT seq, op, text, metadata, at FROM history WHERE item_id = ? ORDER BY seq", (item_id,)
        )
        return [
            {"seq": s, "op": op, "text": t, "metadata": json.loads(m) if m else None, "at": at}
            for s, op, t, m, at in rows
        ]

    def summary(self) -> dict[str, Any]:
        """``oldest``, ``newest`` (timestamps) and ``history_rows`` for ``stats``."""
        assert self.db is not None
        oldest, newest = self.db.execute("SELECT min(timestamp), max(timestamp) FROM items").fetchone()
        history_rows = self.db.execute("SELECT count(*) FROM history").fetchone()[0]
        return {"oldest": oldest, "newest": newest, "history_rows": history_rows}

    def all_ids(self) -> set[int]:
        assert self.db is not None
        return {r[0] for r in self.db.execute("SELECT id FROM items")}

    # writing (inside a transaction) ---------------------------------------------------------------
    @staticmethod
    def next_id(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'items'").fetchone()
        return (row[0] if row else 0) + 1

    @staticmethod
    def insert(db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
        """New items: ``(id, text, metadata JSON, timestamp, importance, created_at, updated_at)``."""
        db.executemany(
            "INSERT INTO items (id, text, metadata, timestamp, importance, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        db.executemany("INSERT INTO items_fts (rowid, text) VALUES (?, ?)", [r[:2] for r in rows])

    @staticmethod
    def record(db: sqlite3.Connection, history: list[tuple[Any, ...]]) -> None:
        """History rows: ``(item_id, op, text, metadata JSON, at)``."""
        db.executemany(
            "INSERT INTO history (item_id, op, text, metadata, at) VALUES (?, ?, ?, ?, ?)", history
        )

    @staticmethod
    def update(
        db: sqlite3.Connection,
        item_id: int,
        text: str,
        meta_json: str,
        timestamp: float,
        importance: float,
        now: float,
    ) -> None:
        """Rewrite an item's row and record the change as an ``update``."""
        db.execute(
            "UPDATE items SET text = ?, metadata = ?, timestamp = ?, importance = ?, updated_at = ? WHERE id = ?",
            (text, meta_json, timestamp, importance, now, item_id),
        )
        RowStore.record(db, [(item_id, "update", text, meta_json, now)])

    @staticmethod
    def add_fields(db: sqlite3.Connection, keys: set[str]) -> None:
        db.executemany("INSERT OR IGNORE INTO fields (name) VALUES (?)", [(k,) for k in sorted(keys)])

    @staticmethod
    def delete_rows(db: sqlite3.Connection, ids: list[int], op: str, now: float) -> None:
        """Delete items, recording each one's last text and metadata as an ``op`` history row."""
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            db.execute(
                f"INSERT INTO history (item_id, op, text, metadata, at) "
                f"SELECT id, ?, text, metadata, ? FROM items WHERE id IN ({marks}) ORDER BY id",
                (op, now, *chunk),
            )
            db.execute(f"DELETE FROM items WHERE id IN ({marks})", chunk)

    def touch(self, ids: list[int], now: float) -> None:
        """Mark items as just used (the ``lru`` eviction's clock)."""
        with self.transaction() as db:
            db.executemany("UPDATE items SET accessed_at = ? WHERE id = ?", [(now, i) for i in ids])
