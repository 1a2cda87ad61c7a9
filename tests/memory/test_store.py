"""EpisodicMemory: add/search/get/update/delete/history, dedupe, eviction, persistence, bad input."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import numpy as np
import pytest

from toolbox.core.errors import ConfigError
from toolbox.memory import EpisodicMemory, MemoryStoreError
from toolbox.memory.embedders.hashing import HashingEmbedder

HASH = {"name": "hashing", "dim": 64}
FACTS = [
    "the cat sat on the mat",
    "dogs bark at the mailman every morning",
    "the stock market fell sharply on monday",
    "paris is the capital of france",
    "water boils at one hundred degrees celsius",
]


@pytest.fixture
def memory(tmp_path):
    m = EpisodicMemory(tmp_path / "store", embedder=HASH)
    yield m
    m.close()


def test_add_search_get_roundtrip(memory):
    ids = memory.add_many(FACTS, [{"i": i} for i in range(len(FACTS))])
    assert ids == [1, 2, 3, 4, 5] and len(memory) == 5
    best = memory.search("a cat on a mat", k=2)
    assert best[0].id == 1 and best[0].similarity > best[1].similarity
    # the similarity is the cosine of the two hashing vectors
    e = HashingEmbedder(dim=64)
    expected = float(e.embed(["a cat on a mat"])[0] @ e.embed([FACTS[0]])[0])
    assert best[0].similarity == pytest.approx(expected, abs=1e-6)
    assert best[0].similarity == pytest.approx(0.5627, abs=1e-4)  # pinned for the hashing embedder
    item = memory.get(4)
    assert item.text == FACTS[3] and item.metadata == {"i": 3}
    assert memory.get(99) is None
    rec = memory.add(
        {"text": "a record", "metadata": {"k": "v"}, "importance": 2.0, "timestamp": "2026-01-01"}
    )
    assert memory.get(rec).importance == 2.0 and memory.get(rec).timestamp == 1767225600.0


def test_update_delete_and_history(memory):
    (i,) = memory.add_many(["the cat sat on the mat"], [{"v": 1}])
    memory.update(i, metadata={"v": 2})
    memory.update(i, text="the dog slept on the sofa")
    e = HashingEmbedder(dim=64)
    query = e.embed(["a dog on a sofa"])[0]
    found = memory.search("a dog on a sofa", k=1)[0]  # the new text was re-embedded
    assert found.similarity == pytest.approx(
        float(query @ e.embed(["the dog slept on the sofa"])[0]), abs=1e-6
    )
    assert found.similarity > float(query @ e.embed(["the cat sat on the mat"])[0]) + 0.2
    assert memory.delete(i) is True and memory.delete(i) is False
    assert memory.get(i) is None and len(memory) == 0
    history = memory.history(i)
    assert [h["op"] for h in history] == ["add", "update", "update", "delete"]
    assert [h["metadata"]["v"] for h in history] == [1, 2, 2, 2]
    assert [h["text"] for h in history] == ["the cat sat on the mat"] * 2 + ["the dog slept on the sofa"] * 2
    with pytest.raises(KeyError, match="no memory item with id"):
        memory.update(i, text="x")


def test_delete_where_refuses_an_empty_filter(memory):
    memory.add_many(FACTS, [{"kind": "a" if i % 2 else "b"} for i in range(5)])
    for empty in (None, {}):
        with pytest.raises(ConfigError, match="refusing an empty filter"):
            memory.delete_where(empty)
    assert len(memory) == 5
    assert memory.delete_where({"kind": "a"}) == 2
    assert sorted(it.id for it in memory.items()) == [1, 3, 5]
    assert memory.search("dogs bark", k=5, filters={"kind": "a"}) == []


@pytest.mark.parametrize("mode", ["skip", "merge"])
def test_dedupe(tmp_path, mode):
    m = EpisodicMemory(tmp_path, embedder=HASH, dedupe=mode, dedupe_threshold=0.9)
    first = m.add("the cat sat on the mat", metadata={"seen": 1, "a": True})
    again = m.add("The cat sat on the mat!", metadata={"seen": 2})  # same words: cosine 1.0
    other = m.add("quantum chromodynamics", metadata={"seen": 3})
    batch = m.add_many(["a brand new fact here", "A brand new fact here."])  # duplicates inside a batch
    assert again == first and other != first and batch[0] == batch[1]
    assert len(m) == 3
    ops = [h["op"] for h in m.history(first)]
    if mode == "skip":
        assert m.get(first).metadata == {"seen": 1, "a": True} and ops == ["add"]
    else:
        assert m.get(first).metadata == {"seen": 2, "a": True} and ops == ["add", "merge"]
        assert m.history(first)[1]["text"] == "The cat sat on the mat!"
    m.close()


@pytest.mark.parametrize(
    ("policy", "survivors"),
    [("oldest", {3, 4, 5}), ("importance", {1, 3, 5}), ("lru", {1, 4, 5})],
)
def test_eviction_holds_the_size_limit(tmp_path, policy, survivors):
    m = EpisodicMemory(tmp_path, embedder=HASH, max_items=3, eviction=policy)
    importance = [5.0, 0.0, 3.0, 1.0, 9.0]
    for i, text in enumerate(FACTS):
        m.add(text, timestamp=1000.0 + i, importance=importance[i])
        assert len(m) <= 3
        if policy == "lru" and i == 2:
            m.get(1)  # item 1 used recently: item 2 and 3 go first
    assert {it.id for it in m.items()} == survivors
    assert set(m.index.ids().tolist()) == survivors
    evicted = ({1, 2, 3, 4, 5} - survivors).pop()
    assert m.history(evicted)[-1]["op"] == "evict"
    m.close()


def test_eviction_within_one_batch(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH, max_items=2)
    m.add_many(FACTS, timestamps=[float(i) for i in range(5)])
    assert [it.id for it in m.items()] == [4, 5] and m.check()["ok"]
    m.close()


def test_recency_and_text_match_change_the_ranking(memory):
    now = 1_000_000.0
    old = memory.add("meeting notes about the budget", timestamp=now - 10 * 86400)
    new = memory.add("meeting notes about the budget review", timestamp=now - 3600)
    plain = memory.search("meeting notes about the budget", k=2, now=now)
    assert plain[0].id == old  # identical text wins on similarity alone
    recent = memory.search(
        "meeting notes about the budget", k=2, recency_half_life=86400, recency_weight=0.5, now=now
    )
    assert recent[0].id == new
    decay = 0.5 ** (3600 / 86400)
    assert recent[0].score == pytest.approx(recent[0].similarity + 0.5 * decay, abs=1e-6)
    # the text match: only one item has the word "review"
    text = memory.search("review", k=2, text_weight=1.0)
    assert text[0].id == new and text[0].score == pytest.approx(text[0].similarity + 1.0, abs=1e-6)
    assert memory.search("budget", k=5, min_score=0.99) == []


def test_reopen_persists_and_converts_the_index(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH, flush_every=3)
    m.add_many(FACTS[:4])
    m.delete(2)
    m.add(FACTS[4])
    expected = [it.id for it in m.search("the capital of france", k=3)]
    m.close()
    m = EpisodicMemory(tmp_path)  # the embedder and index come from the store
    assert m.embedder.identity == HashingEmbedder(dim=64).identity and m.index_spec == {"name": "exact"}
    assert [it.id for it in m.search("the capital of france", k=3)] == expected and m.check()["ok"]
    m.close()
    m = EpisodicMemory(tmp_path, index={"name": "hnsw", "M": 8})
    assert type(m.index).__name__ == "HnswIndex" and len(m.index) == 4
    assert [it.id for it in m.search("the capital of france", k=3)] == expected
    m.close()
    m = EpisodicMemory(tmp_path)
    assert m.index_spec == {"name": "hnsw", "M": 8}  # the conversion was saved
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("index-")) == [
        f"index-{m._gen:06d}"
    ]
    m.close()


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_reopen_without_a_snapshot_replays_the_log_in_order(tmp_path, index):
    """Adds, an update of an added item (its id twice in the log), deletions and a re-added text,
    none snapshotted (a kill: ``_close_handles`` without ``flush``): the replay batches runs of adds
    and must still end with each item's last vector and without the deleted ones."""
    m = EpisodicMemory(tmp_path, embedder=HASH, index=index, flush_every=10**6)
    ids = m.add_many(FACTS[:4])
    m.update(ids[1], text="an entirely different sentence about tides")
    m.delete(ids[2])
    m.add_many([FACTS[2], "another new memory"])
    m.delete(ids[0])
    expected = {i: m.index.get(np.array([i]))[0] for i in sorted(m.index.ids().tolist())}
    assert m._log.unsaved == 9 and m._log.gen == 0
    m._close_handles()
    m = EpisodicMemory(tmp_path)
    assert m.check()["ok"] and sorted(m.index.ids().tolist()) == list(expected)
    for i, v in expected.items():
        np.testing.assert_allclose(m.index.get(np.array([i]))[0], v, atol=1e-6)
    top = m.search("an entirely different sentence about tides", k=1)[0]
    assert top.id == ids[1]
    m.close()


def _digest(folder):
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_wrong_embedder_or_newer_store_is_refused_unchanged(tmp_path):
    m = EpisodicMemory(tmp_path, embedder=HASH)
    m.add_many(FACTS)
    m.close()
    before = _digest(tmp_path)
    with pytest.raises(MemoryStoreError, match=r"makes 32-dimensional vectors.*holds 64-dimensional"):
        EpisodicMemory(tmp_path, embedder={"name": "hashing", "dim": 32})
    with pytest.raises(
        MemoryStoreError, match=r"holds vectors from hashing\(dim=64.*seed=0\), not from .*seed=1"
    ):
        EpisodicMemory(tmp_path, embedder={"name": "hashing", "dim": 64, "seed": 1})
    assert _digest(tmp_path) == before
    con = sqlite3.connect(tmp_path / "memory.sqlite")
    con.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    before = _digest(tmp_path)
    with pytest.raises(
        MemoryStoreError, match=r"newer toolbox \(store schema 7; this toolbox reads up to 2\); upgrade"
    ):
        EpisodicMemory(tmp_path)
    assert _digest(tmp_path) == before


def test_bad_input_errors(tmp_path):
    with pytest.raises(ConfigError, match="is new: give an embedder"):
        EpisodicMemory(tmp_path / "a")
    with pytest.raises(ConfigError, match="unknown embedder 'hashin'.*Did you mean 'hashing'"):
        EpisodicMemory(tmp_path / "b", embedder={"name": "hashin"})
    with pytest.raises(ConfigError, match="memory.eviction"):
        EpisodicMemory(tmp_path / "c", embedder=HASH, eviction="newest")
    m = EpisodicMemory(tmp_path / "d", embedder=HASH)
    with pytest.raises(ConfigError, match="metadata must be JSON"):
        m.add("x", metadata={"bad": float("nan")})
    with pytest.raises(ConfigError, match="non-empty string"):
        m.add("   ")
    with pytest.raises(ConfigError, match=r"vectors must have shape \(1, 64\)"):
        m.add_many(["x"], vectors=np.zeros((1, 8)))
    with pytest.raises(MemoryStoreError, match="open in another process"):
        EpisodicMemory(tmp_path / "d")
    assert len(m) == 0
    m.close()
    EpisodicMemory(tmp_path / "d").close()  # the lock is released on close


def test_export_writes_json_lines(memory, tmp_path):
    memory.add_many(FACTS, [{"i": i} for i in range(5)])
    n = memory.export(tmp_path / "out.jsonl", filters={"i": {"gte": 3}})
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert n == 2 and [x["text"] for x in lines] == FACTS[3:] and lines[0]["metadata"] == {"i": 3}


def test_broad_filters_oversample_the_graph(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((400, 64)).astype(np.float32)
    m = EpisodicMemory(tmp_path, embedder=HASH, index={"name": "hnsw", "exact_below": 5, "ef_search": 100})
    m.add_many([f"item {i}" for i in range(400)], [{"topic": i % 4} for i in range(400)], vectors=vectors)
    queries = rng.standard_normal((20, 64)).astype(np.float32)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    hits = 0
    for q in queries:
        found = m.search(q, k=5, filters={"topic": 1})  # 100 matching > exact_below: the oversampled path
        assert len(found) == 5 and all(it.metadata["topic"] == 1 for it in found)
        scores = unit[1::4] @ (q / np.linalg.norm(q))
        truth = {4 * int(j) + 2 for j in np.argsort(-scores)[:5]}  # ids start at 1
        hits += len(truth & {it.id for it in found})
    assert hits / (5 * len(queries)) >= 0.9
    assert m.search(queries[0], k=5, filters={"topic": 7}) == []
    m.close()


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_a_query_vector_of_any_norm_ranks_by_cosine(tmp_path, index):
    """The search by similarity alone hands the raw vector to the index (which normalises it); the
    filtered and blended searches normalise it first: all give the same cosine similarities."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((30, 32)).astype(np.float32)
    m = EpisodicMemory(tmp_path, embedder={"name": "hashing", "dim": 32}, index=index)
    m.add_many([f"memory {i}" for i in range(30)], [{"n": i} for i in range(30)], vectors=vectors)
    q = rng.standard_normal(32).astype(np.float32)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosine = unit @ (q / np.linalg.norm(q))
    want = np.argsort(-cosine)[:5] + 1
    for scale in (1.0, 12.0, 0.05):
        plain = m.search(scale * q, k=5)
        filtered = m.search(scale * q, k=5, filters={"n": {"gte": 0}})
        assert [it.id for it in plain] == [it.id for it in filtered] == want.tolist()
        assert [it.similarity for it in plain] == pytest.approx(cosine[want - 1].tolist(), abs=1e-5)
        assert [it.similarity for it in filtered] == pytest.approx(cosine[want - 1].tolist(), abs=1e-5)
        assert [it.id for it in m.search(scale * q, k=30, min_score=0.2)] == (
            np.flatnonzero(cosine >= 0.2)[np.argsort(-cosine[cosine >= 0.2])] + 1
        ).tolist()
    m.close()


def test_a_schema_1_store_is_migrated_on_open(tmp_path):
    """Schema 1 indexed new items' text with a trigger and kept a second copy of the hnsw vectors
    (exact.npz): opened now, the trigger goes (or every new item would be indexed twice), the
    schema says 2, and its index still loads from that copy."""
    m = EpisodicMemory(tmp_path, embedder=HASH, index="hnsw")
    ids = m.add_many(FACTS[:4])
    m.flush()
    vectors = m.index.get(np.array(ids))
    m.index._vectors.save(m._log.folder(m._gen))  # the second copy a schema-1 snapshot wrote
    m.close()
    con = sqlite3.connect(tmp_path / "memory.sqlite")
    con.executescript(
        "UPDATE meta SET value = '1' WHERE key = 'schema_version';"
        "CREATE TRIGGER items_fts_insert AFTER INSERT ON items BEGIN "
        "INSERT INTO items_fts (rowid, text) VALUES (new.id, new.text); END;"
    )
    con.close()
    m = EpisodicMemory(tmp_path)
    assert (m.index.get(np.array(ids)) == vectors).all()  # read from exact.npz, bit for bit
    new = m.add("a review of the quarterly budget")
    assert [it.id for it in m.search("quarterly", k=3, text_weight=1.0) if "quarterly" in it.text] == [new]
    m.close()
    con = sqlite3.connect(tmp_path / "memory.sqlite")
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
    assert con.execute("SELECT name FROM sqlite_master WHERE name = 'items_fts_insert'").fetchall() == []
    con.execute("INSERT INTO items_fts (items_fts) VALUES ('integrity-check')")  # raises if FTS != rows
    assert con.execute("SELECT count(*) FROM items_fts WHERE items_fts MATCH 'quarterly'").fetchone() == (1,)
    con.close()


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_a_large_batch_indexed_beside_the_sqlite_writes_equals_one_indexed_after(
    tmp_path, monkeypatch, index
):
    """add_many of >= BACKGROUND_ADD new items adds them to the index on a thread while SQLite writes
    their rows: the index then holds exactly what the serial add gives."""
    import toolbox.memory.store as store_module

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1500, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = [f"item {i}" for i in range(1500)]
    found = {}
    for mode, threshold in (("beside", 1024), ("after", 10**9)):
        monkeypatch.setattr(store_module, "BACKGROUND_ADD", threshold)
        with EpisodicMemory(tmp_path / mode, embedder={"name": "hashing", "dim": 32}, index=index) as m:
            ids = m.add_many(texts, vectors=vectors)
            assert ids == list(range(1, 1501)) and m.check()["ok"]
            hits = [[h.id for h in m.search(v, k=5)] for v in vectors[:50]]
            found[mode] = (m.index.get(np.array(ids)), hits)
    np.testing.assert_array_equal(found["beside"][0], found["after"][0])
    assert found["beside"][1] == found["after"][1]
    assert [hits[0] for hits in found["beside"][1]] == list(range(1, 51))


def test_a_large_batch_that_does_not_commit_leaves_the_index_as_it_was(memory, monkeypatch):
    """A failure inside the transaction (after the index's add started) rolls the rows back and
    takes the vectors out again: the index and SQLite still agree."""
    from toolbox.memory.storage.row_store import RowStore

    memory.add("kept")

    def fail(db, keys):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(RowStore, "add_fields", staticmethod(fail))
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        memory.add_many([f"lost {i}" for i in range(2000)])
    assert len(memory) == 1 and len(memory.index) == 1 and memory.check()["ok"]
    assert [h.text for h in memory.search("lost 7", k=3)] == ["kept"]
