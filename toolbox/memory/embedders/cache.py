"""The embedding cache: vectors on disk in SQLite, keyed by (embedder identity, text).

Wrapping an embedder in ``CachedEmbedder`` embeds only the texts it has not seen; a second run over
the same texts reads them back. Writes are one SQLite transaction per batch (atomic).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from toolbox.core.sqlite_busy import until_unlocked
from toolbox.memory.embedders.base import Embedder

_CHUNK = 500  # SQLite's parameter limit is far above; keeps each IN (...) short


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


class CachedEmbedder(Embedder):
    """``embedder`` with its vectors cached in ``path`` (an SQLite file, created if missing)."""

    def __init__(self, embedder: Embedder, path: str | Path) -> None:
        self.inner = embedder
        self.dim = embedder.dim
        self.batch_size = embedder.batch_size
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60.0)
        until_unlocked(self._prepare, 60.0)  # several processes may share one cache file
        self.hits = 0
        self.misses = 0

    def _prepare(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (embedder TEXT NOT NULL, key BLOB NOT NULL, "
            "vector BLOB NOT NULL, PRIMARY KEY (embedder, key))"
        )
        self._db.commit()

    @property
    def identity(self) -> str:
        return self.inner.identity

    def _embed_batch(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - embed is overridden
        return self.inner._embed_batch(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        keys = [_key(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        ident = self.identity
        unique = list(dict.fromkeys(keys))
        for i in range(0, len(unique), _CHUNK):
            chunk = unique[i : i + _CHUNK]
            rows = self._db.execute(
                f"SELECT key, vector FROM embeddings WHERE embedder = ? AND key IN ({','.join('?' * len(chunk))})",
                (ident, *chunk),
            )
            found.update((k, np.frombuffer(v, dtype=np.float32)) for k, v in rows)
        todo = [i for i, k in enumerate(keys) if k not in found]
        first_of = {}
        for i in todo:
            first_of.setdefault(keys[i], i)
        if first_of:
            fresh = self.inner.embed([texts[i] for i in first_of.values()])
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings (embedder, key, vector) VALUES (?, ?, ?)",
                    [(ident, k, v.tobytes()) for k, v in zip(first_of, fresh, strict=True)],
                )
            found.update(zip(first_of, fresh, strict=True))
        for i, k in enumerate(keys):
            out[i] = found[k]
        self.misses += len(first_of)
        self.hits += len(texts) - len(todo)
        return out

    def close(self) -> None:
        self._db.close()
