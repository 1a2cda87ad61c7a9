"""Stores: several writer processes, a writer killed mid-write, secrets, bad files, queries."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from toolbox.tracing import ActionRecord, Query, Score, TraceError, Tracer, open_store
from toolbox.tracing.stores.sqlite import SqliteStore

WRITER = textwrap.dedent(
    """
    import sys
    from toolbox.tracing import ActionRecord, open_store
    path, worker, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = open_store(path)
    i = 0
    while n < 0 or i < n:
        rows = [ActionRecord("custom", "w", id=f"{worker:04d}{j:012d}", trace_id=f"t{worker}", start_time=j)
                for j in range(i, i + batch)]
        store.write(rows)
        i += batch
        print(i, flush=True)
    store.close()
    """
)


def _env():
    return {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_four_processes_write_one_sqlite_store_each_record_once(tmp_path):
    path = tmp_path / "traces.sqlite"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(w), "10000", "100"],
            stdout=subprocess.DEVNULL,
            env=_env(),
        )  # fmt: skip
        for w in range(4)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*), count(DISTINCT id) FROM records").fetchone() == (40000, 40000)
    per_worker = dict(con.execute("SELECT trace_id, count(*) FROM records GROUP BY trace_id").fetchall())
    assert per_worker == {"t0": 10000, "t1": 10000, "t2": 10000, "t3": 10000}
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sigkill_mid_write_leaves_a_consistent_store(tmp_path):
    path = tmp_path / "traces.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "7", "-1", "50"],
                            stdout=subprocess.PIPE, text=True, env=_env())  # fmt: skip
    committed = 0
    for line in proc.stdout:
        committed = int(line)
        if committed >= 2000:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    count = con.execute("SELECT count(*) FROM records").fetchone()[0]
    # everything reported committed is there, and nothing but whole transactions of 50
    assert count >= committed and count % 50 == 0
    ids = [r[0] for r in con.execute("SELECT id FROM records ORDER BY id")]
    assert ids == [f"{7:04d}{j:012d}" for j in range(count)]
    con.close()
    with open_store(path) as store:  # opens and takes writes again
        store.write([ActionRecord("custom", "after", id="after")])
        assert store.get("after").name == "after"


def test_a_secret_is_absent_from_the_bytes_of_both_store_files(tmp_path):
    key, mail, phone = "sk-proj-Abc123Def456Ghi789Jkl012", "jane.doe@example.com", "+44 20 7946 0958"
    for name in ("t.jsonl", "t.sqlite"):
        path = tmp_path / name
        with Tracer(path) as tracer, tracer.span(
            "llm_call", "chat", inputs=[{"role": "user", "parts": [{"type": "text", "content": f"key {key}, mail {mail}, call {phone}, 12+30"}]}],
            metadata={"auth": f"Authorization: Bearer {key}"},
        ) as rec:  # fmt: skip
            rec.outputs = f"sent to {mail}"
        files = [p for p in tmp_path.iterdir() if p.name.startswith(name)]
        data = b"".join(p.read_bytes() for p in files)
        for secret in (key, mail, phone, "Abc123Def456"):
            assert secret.encode() not in data, (name, secret)
        assert b"[REDACTED:email]" in data
        with open_store(path) as store:
            r = next(store.query())
            assert "[REDACTED:api_key]" in r.inputs[0]["parts"][0]["content"]
            assert "[REDACTED:phone]" in r.inputs[0]["parts"][0]["content"]
            assert "12+30" in r.inputs[0]["parts"][0]["content"]  # numbers of a task stay
            assert r.outputs == "sent to [REDACTED:email]"


def test_jsonl_reader_skips_and_counts_a_line_cut_by_a_crash(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    with open_store(path) as store:
        store.write([ActionRecord("custom", "a", id="a"), ActionRecord("custom", "b", id="b")])
    with open(path, "ab") as f:
        f.write(b'{"id":"c","kind":"custom","na')  # a writer killed mid-line
    with open_store(path) as store:  # the next writer starts a new line
        store.write([ActionRecord("custom", "d", id="d")])
    store = open_store(path, readonly=True)
    with caplog.at_level(logging.WARNING):
        assert [r.id for r in store.query()] == ["a", "b", "d"]
    assert store.skipped == 1
    assert "skipped 1 record(s): not JSON (a cut line)" in caplog.text


def test_bad_stores_fail_naming_the_file_and_the_fix(tmp_path):
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TraceError, match=r"corrupt\.sqlite: not a SQLite trace store, or corrupt.*\.recover"):
        open_store(corrupt)

    newer = tmp_path / "newer.sqlite"
    open_store(newer).close()
    con = sqlite3.connect(newer)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(
        TraceError, match=r"newer\.sqlite: written with trace schema version 99.*upgrade toolbox"
    ):
        open_store(newer)

    newer_jsonl = tmp_path / "newer.jsonl"
    newer_jsonl.write_text('{"id":"x","kind":"custom","name":"n","trace_id":"t","schema_version":5}\n')
    with pytest.raises(TraceError, match=r"newer\.jsonl line 1: written with trace schema version 5"):
        list(open_store(newer_jsonl).query())

    locked = tmp_path / "locked.sqlite"
    open_store(locked).close()
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = SqliteStore(locked, busy_timeout=0.2)
    except TraceError as e:  # the exclusive lock may already block the open
        assert "locked.sqlite: the trace store is locked by another process" in str(e)
    else:
        with pytest.raises(
            TraceError, match=r"locked\.sqlite: the trace store is locked by another process.*stop it"
        ):
            store.write([ActionRecord("custom", "x")])
    holder.execute("ROLLBACK")

    with pytest.raises(TraceError, match=r"missing\.sqlite: no such trace store"):
        open_store(tmp_path / "missing.sqlite", readonly=True)
    with pytest.raises(TraceError, match=r"unknown trace store type '\.txt'"):
        open_store(tmp_path / "x.txt")


def test_queries_by_index_and_scores_added_after_the_fact(store_path):
    with open_store(store_path) as store:
        rows = [
            ActionRecord(
                "llm_call",
                "chat",
                id=f"r{i}",
                trace_id=f"t{i % 3}",
                session_id=f"s{i % 2}",
                start_time=100.0 + i,
                tags=["even"] if i % 2 == 0 else [],
            )  # fmt: skip
            for i in range(10)
        ]
        rows.append(ActionRecord("tool_call", "calculator", id="tool", trace_id="t0", start_time=50.0))
        assert store.write(rows) == 11
        for i in range(10):
            store.add_score(f"r{i}", Score("reward", i / 10, source="reward"))
        store.add_score("r3", Score("reward", 0.95, source="annotation"))  # a later score wins
        store.add_score("r4", Score("label", "good"))
    with open_store(store_path, readonly=True) as store:
        ids = lambda q: sorted(r.id for r in store.query(q))  # noqa: E731
        assert ids(Query(trace_id="t0")) == ["r0", "r3", "r6", "r9", "tool"]
        assert ids(Query(session_id="s1", kind="llm_call")) == ["r1", "r3", "r5", "r7", "r9"]
        assert ids(Query(name="calculator")) == ["tool"]
        assert ids(Query(since=103, until=106)) == ["r3", "r4", "r5"]
        assert ids(Query(tag="even")) == ["r0", "r2", "r4", "r6", "r8"]
        assert ids(Query(score="reward", min_score=0.75)) == ["r3", "r8", "r9"]
        assert ids(Query(score="label")) == ["r4"]
        assert store.count(Query(kind="llm_call")) == 10
        assert store.get("r3").score("reward").value == 0.95
        assert [s.source for s in store.get("r3").scores] == ["reward", "annotation"]
        groups = {g[0].trace_id: [r.id for r in g] for g in store.traces()}
        assert groups["t0"] == ["tool", "r0", "r3", "r6", "r9"]  # one trace together, by start time


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_delete_traces_removes_their_records_scores_and_tags_only(tmp_path, kind):
    from toolbox.tracing import MemoryStore

    store = open_store(tmp_path / "t.sqlite") if kind == "sqlite" else MemoryStore()
    rows = [ActionRecord("llm_call", "chat", id=f"r{i}", trace_id=f"t{i % 3}", start_time=float(i), tags=["x"])
            for i in range(9)]  # fmt: skip
    store.write(rows)
    for i in range(9):
        store.add_score(f"r{i}", Score("reward", float(i)))
    assert store.delete_traces(["t1", "t2", "t1"]) == 6
    assert sorted(r.id for r in store.query()) == ["r0", "r3", "r6"]
    assert [r.score("reward").value for r in store.query()] == [0.0, 3.0, 6.0]
    assert store.count(Query(tag="x")) == 3 and store.count(Query(score="reward")) == 3
    assert store.delete_traces([]) == 0
    store.write([ActionRecord("llm_call", "chat", id="r1", trace_id="t1", start_time=1.0)])
    assert store.get("r1") is not None  # a removed id can be written again
    if kind == "sqlite":
        assert sqlite3.connect(tmp_path / "t.sqlite").execute("SELECT count(*) FROM scores").fetchone() == (
            3,
        )
    store.close()


def test_a_jsonl_store_refuses_to_delete_traces(tmp_path):
    with (
        open_store(tmp_path / "t.jsonl") as store,
        pytest.raises(TraceError, match=r"append-only.*use a \.sqlite store"),
    ):
        store.delete_traces(["t0"])
