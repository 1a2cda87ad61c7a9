"""until_unlocked: retries SQLite's immediate "database is locked", and only that, up to its timeout."""

from __future__ import annotations

import sqlite3

import pytest

from toolbox.core.sqlite_busy import is_locked, until_unlocked


def test_a_locked_call_is_retried_until_it_succeeds(tmp_path):
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t(x)")
    holder.execute("BEGIN EXCLUSIVE")  # nobody else can read or write
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    calls, waits = [], []

    def read():
        calls.append(1)
        return other.execute("SELECT count(*) FROM t").fetchone()[0]

    def sleep(seconds):  # the holder lets go after the third wait
        waits.append(seconds)
        if len(waits) == 3:
            holder.execute("COMMIT")

    assert until_unlocked(read, timeout=60, sleep=sleep) == 0
    assert len(calls) == 4 and len(waits) == 3
    assert all(0 < w <= 0.2 for w in waits)


def test_it_gives_up_after_the_timeout_with_the_lock_error(tmp_path):
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t(x)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked") as e:
        until_unlocked(lambda: other.execute("SELECT * FROM t").fetchall(), timeout=0.05)
    assert is_locked(e.value)


def test_other_errors_are_not_retried():
    calls = []

    def bad():
        calls.append(1)
        raise sqlite3.OperationalError("no such table: t")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        until_unlocked(bad, timeout=60, sleep=lambda s: pytest.fail("slept"))
    assert calls == [1]
