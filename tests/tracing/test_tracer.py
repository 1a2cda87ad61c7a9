"""Tracer: nesting through contextvars (threads, asyncio), sampling, the redaction hook, bad values."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from toolbox.tracing import MemoryStore, Redactor, TraceError, Tracer, current_record


def test_spans_nest_and_the_decorator_records_arguments_and_result():
    store = MemoryStore()
    tracer = Tracer(store, session_id="s", flush_every=1)

    @tracer.trace(kind="tool_call", name="calculator")
    def calc(expression: str) -> int:
        return eval(expression)  # noqa: S307 - a test tool

    with tracer.span("agent", "solve") as run:
        assert current_record() is run
        assert calc("2+3") == 5
        with pytest.raises(ZeroDivisionError):
            calc("1/0")
    assert current_record() is None
    by_name = {}
    for r in store.records:
        by_name.setdefault(r.name, []).append(r)
    ok, bad = by_name["calculator"]
    assert (ok.parent_id, ok.trace_id, ok.session_id) == (run.id, run.trace_id, "s")
    assert ok.inputs == {"expression": "2+3"} and ok.outputs == 5 and ok.error is None
    assert bad.error.startswith("ZeroDivisionError") and bad.outputs is None
    assert run.parent_id is None and run.end_time >= ok.end_time >= ok.start_time >= run.start_time


def test_threads_and_asyncio_tasks_keep_their_own_parent():
    store = MemoryStore()
    tracer = Tracer(store, flush_every=1)
    barrier = threading.Barrier(2)

    def worker(name: str) -> None:
        with tracer.span("agent", name):
            barrier.wait()  # both roots open at once
            with tracer.span("llm_call", f"{name}-call"):
                barrier.wait()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def task(name: str) -> None:
        with tracer.span("llm_call", f"{name}-call"):
            await asyncio.sleep(0.01)
            with tracer.span("tool_call", f"{name}-tool"):
                await asyncio.sleep(0.01)

    async def main() -> None:
        with tracer.span("agent", "root"):
            await asyncio.gather(task("x"), task("y"))

    asyncio.run(main())
    r = {rec.name: rec for rec in store.records}
    assert r["a-call"].parent_id == r["a"].id and r["b-call"].parent_id == r["b"].id
    assert r["a"].parent_id is None and r["b"].parent_id is None and r["a"].trace_id != r["b"].trace_id
    assert r["x-call"].parent_id == r["root"].id and r["y-call"].parent_id == r["root"].id
    assert r["x-tool"].parent_id == r["x-call"].id and r["y-tool"].parent_id == r["y-call"].id


def test_sampling_keeps_or_drops_whole_traces():
    store = MemoryStore()
    tracer = Tracer(store, sample_rate=0.3, seed=0)
    for _ in range(400):
        with tracer.span("agent", "run"):
            with tracer.span("llm_call", "chat"):
                pass
    tracer.flush()
    roots = [r for r in store.records if r.kind == "agent"]
    calls = [r for r in store.records if r.kind == "llm_call"]
    assert 80 <= len(roots) <= 160  # 0.3 of 400 = 120
    assert {c.parent_id for c in calls} == {r.id for r in roots}
    with pytest.raises(TraceError, match="sample_rate"):
        Tracer(MemoryStore(), sample_rate=1.5)


def test_the_redaction_hook_runs_before_storing_and_can_drop():
    store = MemoryStore()
    seen = []

    def hook(record):
        seen.append(record.name)
        return None if record.name == "private" else Redactor(extra=[("id", r"ID-\d+")])(record)

    tracer = Tracer(store, redact=hook, flush_every=1)
    with tracer.span("custom", "private", inputs="x"):
        pass
    with tracer.span("custom", "public", inputs="customer ID-42 wrote from bob@example.org"):
        pass
    assert seen == ["private", "public"] and tracer.dropped == 1
    assert [r.inputs for r in store.records] == ["customer [REDACTED:id] wrote from [REDACTED:email]"]
    raw = Tracer(MemoryStore(), redact=None, flush_every=1)
    with raw.span("custom", "r", inputs="bob@example.org"):
        pass
    assert raw.store.records[0].inputs == "bob@example.org"


def test_an_unserialisable_value_is_reported_and_kept_as_repr(tmp_path, caplog):
    tracer = Tracer(tmp_path / "t.jsonl")

    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque>"

    with tracer.span("tool_call", "weird", inputs={"obj": Opaque(), "ok": 1}):
        pass
    with caplog.at_level(logging.WARNING):
        tracer.close()
    assert tracer.unserialisable == 1
    assert "inputs.obj is a Opaque, which JSON cannot store" in caplog.text
    from toolbox.tracing import open_store

    r = next(open_store(tmp_path / "t.jsonl").query())
    assert r.inputs == {"obj": "<Opaque>", "ok": 1} and "unserialisable" in r.tags


def test_threads_that_end_spans_and_score_them_share_one_sqlite_store(tmp_path):
    """Spans ended and scored from several threads (as the agent's concurrent runs do): every
    score lands on its record. Without one writer at a time, a score's transaction met a flush's on
    the shared connection ("cannot start a transaction within a transaction"), or found its record
    taken from the buffer but not yet stored."""
    import threading

    from toolbox.tracing import open_store

    path = tmp_path / "t.sqlite"
    tracer = Tracer(path, flush_every=3)
    errors = []

    def work(k: int) -> None:
        try:
            for i in range(150):
                with tracer.span("agent", "run", inputs={"k": k, "i": i}) as run:
                    pass
                tracer.score(run.id, "ok", i % 2 == 0)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tracer.close()
    assert errors == []
    with open_store(path, readonly=True) as store:
        records = list(store.query())
    assert len(records) == 900 and all(r.score("ok") is not None for r in records)
