"""SQLite trace store: indexed, safe with several writer processes at once, crash-safe.

The database runs in WAL mode (readers never block the writer; one writer at a time, the others
wait up to ``busy_timeout`` seconds), each ``write`` is one transaction (``BEGIN IMMEDIATE``), and
``synchronous=NORMAL``: a process killed mid-write loses only its uncommitted transaction, and the
file stays consistent (``PRAGMA integrity_check`` is ok). Tables::

    meta(key, value)                      schema_version
    records(id, parent_id, trace_id, session_id, kind, name, model, start_time, end_time,
            error, data)                  data: the record as JSON (its scores as written; the
                                          scores table, which has later ones too, wins on read)
    tags(record_id, tag)
    scores(record_id, name, data_type, value_num, value_str, source, data)

with indexes on trace, session, kind, name, start time, tag and score (name, value), so
``query`` and ``traces`` read only what they return. ``sqlite3`` opens the file as is.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from toolbox.core.json_codec import loads
from toolbox.core.sqlite_busy import is_locked, until_unlocked
from toolbox.tracing.record import SCHEMA_VERSION, ActionRecord, Score, TraceError, dumps
from toolbox.tracing.stores.base import Query, TraceStore
from toolbox.tracing.validate import MalformedRecord, Skips, record_from_dict

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records(
    id TEXT PRIMARY KEY, parent_id TEXT, trace_id TEXT NOT NULL, session_id TEXT,
    kind TEXT NOT NULL, name TEXT NOT NULL, model TEXT, start_time REAL NOT NULL, end_time REAL,
    error TEXT, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS records_trace ON records(trace_id, start_time);
CREATE INDEX IF NOT EXISTS records_session ON records(session_id, start_time);
CREATE INDEX IF NOT EXISTS records_kind ON records(kind, start_time);
CREATE INDEX IF NOT EXISTS records_name ON records(name, start_time);
CREATE INDEX IF NOT EXISTS records_start ON records(start_time);
CREATE TABLE IF NOT EXISTS tags(record_id TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY(record_id, tag));
CREATE INDEX IF NOT EXISTS tags_tag ON tags(tag);
CREATE TABLE IF NOT EXISTS scores(
    record_id TEXT NOT NULL, name TEXT NOT NULL, data_type TEXT NOT NULL, value_num REAL,
    value_str TEXT, source TEXT, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS scores_record ON scores(record_id);
CREATE INDEX IF NOT EXISTS scores_name ON scores(name, value_num);
"""

CACHE_KIB = 64 << 10  # the page cache of a writing connection (kibibytes)
_SCORES = "(SELECT group_concat(s.data, ',') FROM scores s WHERE s.record_id = r.id)"  # in rowid order


class SqliteStore(TraceStore):
    """Records in a SQLite database at ``path`` (see the module docstring).

    Args:
        path: the database file (created with its schema on first open unless ``create=False``).
        readonly: open read-only (no schema creation, writes fail).
        create: create a missing file.
        busy_timeout: seconds a writer waits for another process's transaction before failing.
    """

    def __init__(
        self, path: str | Path, readonly: bool = False, create: bool = True, busy_timeout: float = 60.0
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.busy_timeout = busy_timeout
        self.skips = Skips()
        if not self.path.exists() and (readonly or not create):
            raise TraceError(f"{self.path}: no such trace store; check the path (or record traces first).")
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        self.conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None,
                                    check_same_thread=False)  # fmt: skip
        with self._errors("open"):
            if not readonly:
                until_unlocked(self._prepare, busy_timeout)
            self._check_version()

    def _prepare(self) -> None:
        """WAL mode, the page cache and the schema (idempotent; retried while another process opens
        the same file: see ``toolbox.core.sqlite_busy``)."""
        # a large store's indexes are written at random keys (ids, trace ids): a page cache that holds
        # their hot pages, not SQLite's 2 MB default; reading in trace order gains nothing from it
        # (measured on a 1M-record store)
        self.conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        try:
            self.conn.executescript(
                "BEGIN IMMEDIATE;" + SCHEMA + "INSERT OR IGNORE INTO meta(key, value) "
                f"VALUES ('schema_version', '{SCHEMA_VERSION}'); COMMIT;"
            )
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    # errors ---------------------------------------------------------------------------------------
    def _errors(self, what: str):
        store = self

        class _Guard:
            def __enter__(self) -> None:
                return None

            def __exit__(self, tp, e, tb) -> bool:
                if e is None or not isinstance(e, sqlite3.Error):
                    return False
                msg = str(e)
                if is_locked(e):
                    raise TraceError(
                        f"{store.path}: the trace store is locked by another process (waited "
                        f"{store.busy_timeout:.0f} s to {what}); let the other writer finish, or stop it, "
                        "or open with a longer busy_timeout."
                    ) from None
                if isinstance(e, sqlite3.DatabaseError) and (
                    "not a database" in msg or "malformed" in msg or "corrupt" in msg
                ):
                    raise TraceError(
                        f"{store.path}: not a SQLite trace store, or corrupt ({msg}); check the path, or "
                        f"salvage it with `sqlite3 {store.path} .recover | sqlite3 recovered.sqlite`."
                    ) from None
                if "no such table" in msg:
                    raise TraceError(
                        f"{store.path}: a SQLite file without the trace store's tables ({msg}); "
                        "point at a store written by toolbox (or open it writable to create them)."
                    ) from None
                if "readonly" in msg:
                    raise TraceError(
                        f"{store.path}: opened read-only; open it without readonly to {what}."
                    ) from None
                raise TraceError(f"{store.path}: {what} failed: {msg}") from None

        return _Guard()

    def _check_version(self) -> None:
        row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        version = int(row[0]) if row else SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            raise TraceError(
                f"{self.path}: written with trace schema version {version}, but this toolbox reads up to "
                f"version {SCHEMA_VERSION}; upgrade toolbox (pip install -U toolbox) to read it."
            )

    # writing --------------------------------------------------------------------------------------
    def write(self, records: Iterable[ActionRecord], lines: list[str] | None = None) -> int:
        """One transaction of ``executemany`` inserts; a record whose id is stored (or earlier in the
        batch) is skipped with its tags and scores."""
        records = list(records)
        pairs = zip(records, lines if lines is not None else [dumps(r) for r in records], strict=True)
        if not records:
            return 0
        with self._errors("write"):
            cur = self.conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                stored = self._stored_ids(cur, [r.id for r in records])
                rows, tags, scores = [], [], []
                for r, data in pairs:
                    if r.id in stored:
                        continue
                    stored.add(r.id)
                    rows.append((r.id, r.parent_id, r.trace_id, r.session_id, r.kind, r.name, r.model,
                                 r.start_time, r.end_time, r.error, data))  # fmt: skip
                    if r.tags:
                        tags += [(r.id, t) for t in r.tags]
                    if r.scores:
                        scores += [_score_row(r.id, s) for s in r.scores]
                cur.executemany("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
                cur.executemany("INSERT OR IGNORE INTO tags VALUES (?,?)", tags)
                cur.executemany("INSERT INTO scores VALUES (?,?,?,?,?,?,?)", scores)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return len(rows)

    @staticmethod
    def _stored_ids(cur: sqlite3.Cursor, ids: list[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(ids), 500):  # SQLite's host-parameter limit is 999 on old builds
            chunk = ids[i : i + 500]
            sql = f"SELECT id FROM records WHERE id IN ({','.join('?' * len(chunk))})"
            found.update(row[0] for row in cur.execute(sql, chunk))
        return found

    def add_score(self, record_id: str, score: Score) -> None:
        with self._errors("add a score"):
            cur = self.conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                if cur.execute("SELECT 1 FROM records WHERE id=?", (record_id,)).fetchone() is None:
                    raise TraceError(
                        f"{self.path}: add_score: no record {record_id}; check the id (toolbox traces ls)."
                    )
                cur.execute("INSERT INTO scores VALUES (?,?,?,?,?,?,?)", _score_row(record_id, score))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def delete_traces(self, trace_ids: Iterable[str]) -> int:
        ids, n = list(dict.fromkeys(trace_ids)), 0
        with self._errors("delete traces"):
            cur = self.conn.cursor()
            cur.execute("BEGIN IMMEDIATE")  # one transaction: all of them go, or none
            try:
                for i in range(0, len(ids), 500):
                    chunk = ids[i : i + 500]
                    marks = ",".join("?" * len(chunk))
                    records = f"SELECT id FROM records WHERE trace_id IN ({marks})"
                    cur.execute(f"DELETE FROM scores WHERE record_id IN ({records})", chunk)
                    cur.execute(f"DELETE FROM tags WHERE record_id IN ({records})", chunk)
                    n += cur.execute(f"DELETE FROM records WHERE trace_id IN ({marks})", chunk).rowcount
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return n

    def close(self) -> None:
        if getattr(self, "conn", None) is not None:
            self.conn.close()
            self.conn = None

    # reading --------------------------------------------------------------------------------------
    def _where(self, q: Query) -> tuple[str, list[Any]]:
        clauses, args = [], []
        for col in ("trace_id", "session_id", "kind", "name"):
            v = getattr(q, col)
            if v is not None:
                clauses.append(f"r.{col} = ?")
                args.append(v)
        if q.since is not None:
            clauses.append("r.start_time >= ?")
            args.append(q.since)
        if q.until is not None:
            clauses.append("r.start_time < ?")
            args.append(q.until)
        if q.tag is not None:
            clauses.append("r.id IN (SELECT record_id FROM tags WHERE tag = ?)")
            args.append(q.tag)
        if q.ids is not None:
            clauses.append(f"r.id IN ({','.join('?' * len(q.ids))})")
            args.extend(q.ids)
        if q.score is not None:
            # the last score of the name decides (as ActionRecord.score)
            sub = "SELECT record_id FROM scores s WHERE s.name = ? AND s.rowid = (SELECT max(rowid) FROM scores s2 WHERE s2.record_id = s.record_id AND s2.name = s.name)"
            args.append(q.score)
            if q.min_score is not None:
                sub += " AND s.value_num >= ?"
                args.append(q.min_score)
            if q.max_score is not None:
                sub += " AND s.value_num <= ?"
                args.append(q.max_score)
            clauses.append(f"r.id IN ({sub})")
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", args

    def _select(self, q: Query, order: str) -> Iterator[ActionRecord]:
        where, args = self._where(q)
        sql = f"SELECT r.data, {_SCORES} FROM records r{where} ORDER BY {order}"
        if q.limit is not None:
            sql += f" LIMIT {int(q.limit)}"
        source = str(self.path)
        self.skips.clear()
        with self._errors("read"):
            cur = self.conn.execute(sql, args)
            while True:
                rows = cur.fetchmany(1000)
                if not rows:
                    break
                for data, scores in rows:
                    r = self._record(data, scores, source)
                    if r is not None:
                        yield r
        self.skips.warn(self.path)

    def _record(self, data: Any, scores: Any, source: str) -> ActionRecord | None:
        """A row as a record; a row that is not one is counted in ``skips`` (None)."""
        try:
            d = loads(data)
        except (ValueError, TypeError):
            self.skips.record("not JSON (a cut line)")
            return None
        if isinstance(d, dict) and scores is not None:
            try:
                d["scores"] = loads(f"[{scores}]")
            except ValueError:
                self.skips.score("not JSON (a cut line)")
                d["scores"] = []
        try:
            return record_from_dict(d, where=source, skips=self.skips)
        except MalformedRecord as e:
            self.skips.record(e.reason)
            return None

    def query(self, q: Query | None = None) -> Iterator[ActionRecord]:
        return self._select(q or Query(), "r.start_time")

    def count(self, q: Query | None = None) -> int:
        where, args = self._where(q or Query())
        with self._errors("count"):
            return int(self.conn.execute(f"SELECT count(*) FROM records r{where}", args).fetchone()[0])

    def traces(self, q: Query | None = None) -> Iterator[list[ActionRecord]]:
        """One trace at a time, read in trace order through the index: bounded memory."""
        group: list[ActionRecord] = []
        for r in self._select(q or Query(), "r.trace_id, r.start_time"):
            if group and r.trace_id != group[0].trace_id:
                yield group
                group = []
            group.append(r)
        if group:
            yield group

    def stats(self) -> dict[str, Any]:
        with self._errors("read"):
            kinds = dict(self.conn.execute("SELECT kind, count(*) FROM records GROUP BY kind").fetchall())
            scores = dict(self.conn.execute("SELECT name, count(*) FROM scores GROUP BY name").fetchall())
        return {"kinds": kinds, "scores": scores}


def _score_row(record_id: str, s: Score) -> tuple:
    num = float(s.value) if s.data_type != "CATEGORICAL" else None
    text = str(s.value) if s.data_type == "CATEGORICAL" else None
    data = json.dumps(s.to_dict(), ensure_ascii=False, separators=(",", ":"))
    return (record_id, s.name, s.data_type, num, text, s.source, data)
