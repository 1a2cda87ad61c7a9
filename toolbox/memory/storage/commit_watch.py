"""Has anything but this store written ``memory.sqlite``? The check the in-memory rows rely on.

The rows a search returns are answered from memory (``toolbox.memory.storage.row_cache``,
``toolbox.memory.storage.resident_rows``); the store keeps them in step with its own writes, so what they
must still notice is a write by anything else. Another process cannot open the store (the folder's
flock, also against a second store object in the same process), but another SQLite connection can
write the file: that is a commit, which ``PRAGMA data_version`` counts. The pragma is a read
transaction (3.5 us, ~30 us right after a graph walk), so ``changed`` first compares the WAL-index
header in ``memory.sqlite-shm`` (SQLite's documented format: every commit rewrites it, and a commit
is visible to readers only once it has) with the one seen at the last check, 0.1 us, and asks the
pragma only when it changed (this connection's own commits change it too). The header is read
before the pragma, so a commit between the two changes it again and is checked next time. Without
a readable ``-shm`` (another journal or locking mode) every check asks the pragma.
"""

from __future__ import annotations

import mmap
import os

from toolbox.memory.storage.row_store import RowStore

_HEADER = 48  # bytes of the first copy of the WAL-index header (iChange, mxFrame, salts, ...)


class CommitWatcher:
    """``changed()``: True once after another SQLite connection committed to the store's file."""

    def __init__(self, rows: RowStore) -> None:
        self.rows = rows
        self._shm = _map_header(rows)
        self._seen = self._header()
        self._version = self._data_version()

    def _header(self) -> bytes | None:
        return None if self._shm is None else self._shm[:_HEADER]

    def _data_version(self) -> int:
        db = self.rows.db
        assert db is not None
        return db.execute("PRAGMA data_version").fetchone()[0]

    def changed(self) -> bool:
        """Whether another connection committed since the last call (or since this watcher began)."""
        header = self._header()
        if header is not None and header == self._seen:
            return False  # nobody committed
        version = self._data_version()
        self._seen = header
        if version != self._version:
            self._version = version
            return True
        return False

    def close(self) -> None:
        """Unmap the ``-shm`` header (before the connection closes: once no connection holds the
        file, the next one to open it truncates it, and reading a truncated mapping is a SIGBUS)."""
        if self._shm is not None:
            self._shm.close()
            self._shm = None
        self._seen = None


def _map_header(rows: RowStore) -> mmap.mmap | None:
    """A read-only mapping of the WAL-index header of the store's open connection (None: none).

    SQLite keeps the ``-shm`` file while a connection has the database open in WAL mode, and
    truncates it only when it is the sole connection opening it, so while ``rows`` is open the
    mapping stays valid."""
    path = rows.path / "memory.sqlite-shm"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size < _HEADER:
            return None
        return mmap.mmap(fd, _HEADER, mmap.MAP_SHARED, mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
