"""The pending log and the index snapshots: how the vector index survives a SIGKILL.

SQLite is the source of truth. Every change writes, in the same transaction as its item rows, a
*pending* row carrying the new vector of an item (or a NULL: a deletion); only after it commits is
the in-memory index changed. ``snapshot`` writes the index into a fresh ``index-N`` folder, fsyncs
it, then in one transaction names it current (``meta.index_gen``, ``meta.index_seq``) and drops
the pending rows it contains. ``load`` reads the current snapshot and replays the pending rows
after it. A kill at any moment therefore leaves either the old or the new state of every change,
and the reopened index holds exactly the items SQLite holds.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from toolbox.core.atomic import fsync_dir
from toolbox.memory.index.base import VectorIndex
from toolbox.memory.storage.row_store import RowStore


class IndexLog:
    """Which snapshot is current (``gen``), which change it holds (``snap_seq``) and which change
    the in-memory index has applied (``applied_seq``), for the store in folder ``path``."""

    def __init__(self, path: Path, rows: RowStore) -> None:
        self.path, self.rows = path, rows
        self.gen = int(rows.meta("index_gen"))
        self.snap_seq = self.applied_seq = int(rows.meta("index_seq"))

    def folder(self, gen: int) -> Path:
        return self.path / f"index-{gen:06d}"

    @property
    def unsaved(self) -> int:
        """Changes applied to the index since the last snapshot."""
        return self.applied_seq - self.snap_seq

    # writing the log (inside the change's transaction) -------------------------------------------
    @staticmethod
    def log(db: sqlite3.Connection, pending: list[tuple[int, bytes | None]]) -> int:
        """Write pending index rows (``(item_id, vector bytes or None)``); return the first seq."""
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'pending'").fetchone()
        first = (row[0] if row else 0) + 1
        db.executemany(
            "INSERT INTO pending (seq, item_id, vector) VALUES (?, ?, ?)",
            [(first + j, item_id, vec) for j, (item_id, vec) in enumerate(pending)],
        )
        return first

    def applied(self, first_seq: int, count: int) -> None:
        """The index now holds the ``count`` changes logged from ``first_seq`` on."""
        if count:
            self.applied_seq = first_seq + count - 1

    def applied_all(self) -> None:
        """The index now holds every logged change."""
        assert self.rows.db is not None
        row = self.rows.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'pending'").fetchone()
        self.applied_seq = row[0] if row else 0

    # opening --------------------------------------------------------------------------------------
    def load(self, spec: dict[str, Any], dim: int) -> VectorIndex:
        """The current snapshot plus the pending rows after it, converted to ``spec`` if it differs."""
        from toolbox.core.registries import VECTOR_INDEXES

        stored_spec = json.loads(self.rows.meta("index_spec"))
        if self.gen > 0:
            settings = {k: v for k, v in stored_spec.items() if k != "name"}
            index = VECTOR_INDEXES.get(stored_spec["name"]).load(self.folder(self.gen), dim, **settings)
        else:
            index = VECTOR_INDEXES.build(stored_spec, "memory.index", dim=dim)
        self.replay(index)
        self.remove_stale_folders()
        if spec != stored_spec:  # another index kind or settings: copy the vectors over, then snapshot
            new = VECTOR_INDEXES.build(spec, "memory.index", dim=dim)
            ids = index.ids()
            for start in range(0, len(ids), 50_000):
                chunk = ids[start : start + 50_000]
                new.add(chunk, index.get(chunk))
            index = new
            self.snapshot(index, index_spec=spec)
        return index

    def replay(self, index: VectorIndex) -> None:
        """Apply the pending rows written after the loaded snapshot (the crash-recovery path): runs
        of additions of distinct ids in one ``add`` each (hnswlib adds them on every core), in the
        log's order with the deletions between them."""
        assert self.rows.db is not None
        rows = self.rows.db.execute(
            "SELECT seq, item_id, vector FROM pending WHERE seq > ? ORDER BY seq", (self.applied_seq,)
        )
        run_ids: list[int] = []
        run_vectors: list[bytes] = []

        def add_run() -> None:
            if run_ids:
                vectors = np.frombuffer(b"".join(run_vectors), dtype=np.float32).reshape(len(run_ids), -1)
                index.add(np.array(run_ids, dtype=np.int64), vectors)
                run_ids.clear()
                run_vectors.clear()

        seen: set[int] = set()
        for seq, item_id, vector in rows:
            if vector is None or item_id in seen or len(run_ids) >= 10_000:
                add_run()
                seen.clear()
            if vector is None:
                index.remove(np.array([item_id], dtype=np.int64))
            else:
                run_ids.append(item_id)
                run_vectors.append(vector)
                seen.add(item_id)
            self.applied_seq = seq
        add_run()

    def remove_stale_folders(self) -> None:
        """Index folders other than the current one: a crash left them, nothing reads them."""
        current = self.folder(self.gen).name
        for p in self.path.iterdir():
            if (
                p.is_dir()
                and (p.name.startswith("index-") or p.name.startswith(".index-"))
                and p.name != current
            ):
                shutil.rmtree(p, ignore_errors=True)

    # snapshots ------------------------------------------------------------------------------------
    def snapshot(self, index: VectorIndex, index_spec: dict[str, Any] | None = None) -> None:
        """Write ``index`` as the next generation, name it current, drop the pending rows it holds."""
        gen = self.gen + 1
        final = self.folder(gen)
        tmp = self.path / f".index-{gen:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        index.save(tmp)
        fsync_dir(tmp)
        os.replace(tmp, final)
        fsync_dir(self.path)
        with self.rows.transaction() as db:
            updates = [("index_gen", str(gen)), ("index_seq", str(self.applied_seq))]
            if index_spec is not None:
                updates.append(("index_spec", json.dumps(index_spec, sort_keys=True)))
            db.executemany("UPDATE meta SET value = ? WHERE key = ?", [(v, k) for k, v in updates])
            db.execute("DELETE FROM pending WHERE seq <= ?", (self.applied_seq,))
        old, self.gen, self.snap_seq = self.gen, gen, self.applied_seq
        if old > 0:
            shutil.rmtree(self.folder(old), ignore_errors=True)
