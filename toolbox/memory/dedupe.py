"""Deduplicated adds: a new memory within a cosine threshold of a stored one (or of an earlier one
in the same batch) is skipped, or merged into it (``dedupe="merge"``: its metadata is merged in,
the later timestamp and the higher importance are kept, and the history records a ``merge``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

import numpy as np

from toolbox.memory.index.base import VectorIndex
from toolbox.memory.metadata_filters import dumps_metadata


def duplicates(index: VectorIndex, vectors: np.ndarray, threshold: float) -> list[tuple[str, int] | None]:
    """For each new vector: ("store", id) or ("batch", earlier position) of a duplicate, or None."""
    out: list[tuple[str, int] | None] = []
    if len(index):
        best_ids, best = index.search(vectors, 1)
    else:
        best_ids, best = np.full((len(vectors), 1), -1), np.full((len(vectors), 1), -np.inf)
    kept: list[int] = []
    for i, v in enumerate(vectors):
        hit: tuple[str, int] | None = None
        if best[i, 0] >= threshold:
            hit = ("store", int(best_ids[i, 0]))
        elif kept:
            sims = vectors[kept] @ v
            j = int(np.argmax(sims))
            if sims[j] >= threshold:
                hit = ("batch", kept[j])
        if hit is None:
            kept.append(i)
        out.append(hit)
    return out


def merge(
    db: sqlite3.Connection,
    item_id: int,
    text: str,
    metadata: Mapping[str, Any] | None,
    timestamp: float,
    importance: float,
    now: float,
) -> None:
    """Merge a duplicate add into item ``item_id`` (inside the add's transaction)."""
    row = db.execute("SELECT metadata, timestamp, importance FROM items WHERE id = ?", (item_id,)).fetchone()
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
