"""Retrying SQLite statements that SQLite refuses at once when another process holds a lock.

``sqlite3.connect(timeout=...)`` installs a busy handler, but SQLite does not call it in every case:
a connection that must turn a shared lock into an exclusive one while another connection waits for
the same (``PRAGMA journal_mode=WAL`` on a file several processes open at once, a schema created in
the same instant) gets ``database is locked`` immediately, to avoid a deadlock. Measured here: four
processes opening one new trace store together failed 2 times in 160 opens, each after 0.01 s.
``until_unlocked`` retries such a call, with short growing waits, until ``timeout`` seconds have
passed.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def is_locked(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's "database is locked" / "busy" (worth waiting for)."""
    msg = str(error)
    return isinstance(error, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def until_unlocked(fn: Callable[[], T], timeout: float, sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, called again while it fails with a lock error, for up to ``timeout`` seconds; then
    the last error propagates. ``fn`` must leave no transaction open when it fails."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            left = deadline - time.monotonic()
            if not is_locked(e) or left <= 0:
                raise
            sleep(min(left, delay * (1 + random.random())))
            delay = min(delay * 2, 0.1)
