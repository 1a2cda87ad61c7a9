"""The resident copy of every row (``row_cache="all"``, the default): loaded by the first search and
no earlier, an add's rows put in after its commit (and read from SQLite if that step never ran),
freed slots reused, equal metadata strings shared, answers equal to the SQLite path's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from toolbox.memory import EpisodicMemory
from toolbox.memory.storage.row_store import item_fields

HASH = {"name": "hashing", "dim": 32}
FIELDS = ("id", "text", "metadata", "timestamp", "importance", "created_at", "updated_at", "accessed_at")


def rows_of(m: EpisodicMemory) -> dict:
    return {row[0]: item_fields(row) for row in m._rows.fetch_rows(sorted(m._rows.all_ids()))}


def test_loaded_by_the_first_search_only(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH)
    m.add_many([f"note {i} about cats" for i in range(30)], [{"i": i} for i in range(30)])
    m.stats(), m.get(1), list(m.items({"i": {"lt": 3}})), m.export(tmp_path / "out.jsonl")
    assert not m._cache.loaded and len(m._cache) == 0  # adding, reading, exporting: no load
    m.close()
    again = EpisodicMemory(tmp_path)
    assert not again._cache.loaded
    found = again.search("cats", k=5)
    assert again._cache.stats() | {"hits": 0} == {
        "rows": 30,
        "size": "all",
        "loaded": True,
        "loads": 1,
        "hits": 0,
        "misses": 0,
    }
    assert again._cache.held() == rows_of(again)
    assert [it.id for it in found] == [it.id for it in again.search("cats", k=5)]
    again.close()


def test_an_adds_rows_are_held_after_its_commit(tmp_path, monkeypatch):
    m = EpisodicMemory(tmp_path, embedder=HASH)
    m.add("the cat sat on the mat")
    m.search("cat", k=1)  # loaded
    b = m.add("the dog slept on the sofa", metadata={"pet": "dog"}, timestamp=5.0, importance=0.5)
    assert b in m._cache and m._cache.held() == rows_of(m)
    [hit] = m.search("dog sofa", k=1)
    assert (hit.id, hit.metadata, hit.timestamp, hit.importance) == (b, {"pet": "dog"}, 5.0, 0.5)
    assert m._cache.misses == 0  # answered from memory

    def fail(rows):  # an exception after the add committed, before the rows were put in
        raise RuntimeError("interrupted")

    monkeypatch.setattr(m._cache, "added", fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        m.add("a parrot on the perch", metadata={"pet": "parrot"})
    monkeypatch.undo()
    c = max(m._rows.all_ids())
    assert c not in m._cache  # not put in: read from SQLite when a search returns it
    [hit] = m.search("parrot perch", k=1)
    assert (hit.id, hit.text, hit.metadata) == (c, "a parrot on the perch", {"pet": "parrot"})
    assert m._cache.misses == 1 and c in m._cache
    m.close()


def test_freed_slots_are_reused_and_the_copy_follows_eviction(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH, max_items=20)
    m.add_many([f"first batch item {i}" for i in range(20)])
    m.search("item", k=3)
    slots = m._cache._used
    for round_ in range(5):  # each add of 10 evicts the 10 oldest: the slots they held are reused
        m.add_many([f"round {round_} item {i}" for i in range(10)], [{"round": round_}] * 10)
        m.search("item", k=3)
    assert len(m) == 20 and len(m._cache) == 20 and m._cache._used == slots
    assert m._cache.held() == rows_of(m)
    m.close()


def test_an_add_that_evicts_its_own_rows_leaves_them_out(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH, max_items=2, eviction="importance")
    m.add_many(["kept one", "kept two"], importances=[5.0, 5.0])
    m.search("kept", k=1)
    ids = m.add_many(["dropped at once", "also dropped"], importances=[0.0, 0.0])
    assert not set(ids) & set(m._cache.held()) and m._cache.held() == rows_of(m)
    m.close()


def test_equal_metadata_strings_are_shared(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH)
    m.add_many([f"item {i}" for i in range(6)], [{"source": "eval"}] * 3 + [{"n": i} for i in range(3)])
    m.search("item", k=1)
    held = m._cache.held()
    assert held[1]["_metadata_json"] is held[2]["_metadata_json"] is held[3]["_metadata_json"]
    assert json.loads(held[4]["_metadata_json"]) == {"n": 0}
    m.close()


@pytest.mark.parametrize("filters", [None, {"n": {"lt": 15}}])
def test_the_same_answers_as_the_sqlite_path(tmp_path, filters):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((40, 32)).astype(np.float32)
    m = EpisodicMemory(tmp_path, embedder=HASH, index="hnsw", row_cache=0)
    m.add_many([f"memory {i}" for i in range(40)], [{"n": i} for i in range(40)], vectors=vectors)
    queries = rng.standard_normal((10, 32)).astype(np.float32)
    want = [
        [tuple(getattr(it, f) for f in (*FIELDS, "score")) for it in m.search(q, 5, filters)] for q in queries
    ]
    m.close()
    m = EpisodicMemory(tmp_path, row_cache="all")
    got = [
        [tuple(getattr(it, f) for f in (*FIELDS, "score")) for it in m.search(q, 5, filters)] for q in queries
    ]
    # the reopened hnsw index reads its vectors from hnsw.bin, as hnswlib normalised them: scores
    # may differ from the first session's in the last bit
    assert [[r[:-1] for r in q] for q in got] == [[r[:-1] for r in q] for q in want] and m._cache.loaded
    assert [[r[-1] for r in q] for q in got] == [[pytest.approx(r[-1], abs=1e-6) for r in q] for q in want]
    m.close()


@pytest.mark.parametrize("with_orjson", [True, False])
def test_metadata_json_is_sorted_and_reads_back_the_same_with_or_without_orjson(monkeypatch, with_orjson):
    import toolbox.core.json_codec as codec
    from toolbox.memory.metadata_filters import dumps_metadata

    monkeypatch.setattr(codec, "orjson", codec.orjson if with_orjson else None)
    meta = {"b": 1, "a": [1.5, "é", None], "z": {"y": True, "x": -0.0}}
    text = dumps_metadata(meta)
    assert json.loads(text) == meta and list(json.loads(text)) == ["a", "b", "z"]
    assert "é" in text  # not escaped: FTS5 and exports read the text as written
    assert (text == '{"a":[1.5,"é",null],"b":1,"z":{"x":-0.0,"y":true}}') == with_orjson
    assert json.loads(dumps_metadata({"big": 2**70})) == {"big": 2**70}  # beyond orjson: json writes it
